-- Extends one owner's read lease on an RWMutex while it still holds it.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  zset of read holders: field -> lease deadline (ms, Redis clock)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 when renewed, 0 when the owner's read hold is gone or its lease
-- already ran out.
redis.replicate_commands()
local s = redis.call('zscore', KEYS[2], ARGV[1])
if not s or redis.call('hexists', KEYS[1], 'r:' .. ARGV[1]) == 0 then
  return 0
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) <= now then
  return 0
end
local lease = tonumber(ARGV[2])
redis.call('zadd', KEYS[2], now + lease, ARGV[1])
for i = 1, 2 do
  if redis.call('pttl', KEYS[i]) < lease then
    redis.call('pexpire', KEYS[i], lease)
  end
end
return 1
