-- Takes, re-enters or queues for a fair lock.
--
-- KEYS[1]  the lock's hash (owner field -> hold count, PEXPIRE lease)
-- KEYS[2]  the queue: zset of waiter field -> arrival number
-- KEYS[3]  the waiters' deadlines: zset of waiter field -> ms (Redis clock)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  hold count the caller had before this call (0 for a first hold)
-- ARGV[4]  waiter timeout in ms: the caller joins the queue (or refreshes its
--          place) with a deadline that far ahead; 0 = do not queue (TryLock)
-- ARGV[5]  channel prefix: a waiter is woken on prefix .. field
--
-- The lock is taken when it is free and the caller heads the queue (or the
-- queue is empty). Waiters whose deadline has passed are dropped first. The
-- count is set to ARGV[3] + 1 rather than incremented, and queueing twice
-- keeps the first place, so a call that go-redis resends cannot count twice.
--
-- Returns {1, count} when the owner holds the lock, or {0, ms}: how long the
-- caller may wait before it is worth trying again (-1: the lock has no
-- expiry). A key of another type fails with WRONGTYPE.
redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local field = ARGV[2]

local head0 = redis.call('zrange', KEYS[2], 0, 0)[1]
for _, f in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now)) do
  redis.call('zrem', KEYS[2], f)
  redis.call('zrem', KEYS[3], f)
end

local free = redis.call('exists', KEYS[1]) == 0
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if redis.call('hexists', KEYS[1], field) == 1 or (free and (head == nil or head == field)) then
  local n = tonumber(ARGV[3]) + 1
  redis.call('hset', KEYS[1], field, n)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if head ~= nil then
    redis.call('zrem', KEYS[2], field)
    redis.call('zrem', KEYS[3], field)
  end
  return {1, n}
end

local tmo = tonumber(ARGV[4])
if tmo > 0 then
  if not redis.call('zscore', KEYS[2], field) then
    local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
    local seq = 1
    if last[2] then
      seq = tonumber(last[2]) + 1
    end
    redis.call('zadd', KEYS[2], seq, field)
  end
  redis.call('zadd', KEYS[3], now + tmo, field)
  -- The queue's keys vanish once the last waiter's deadline has passed.
  for i = 2, 3 do
    if redis.call('pttl', KEYS[i]) < tmo then
      redis.call('pexpire', KEYS[i], tmo)
    end
  end
end

if not free then
  return {0, redis.call('pttl', KEYS[1])}
end
-- Free, but promised to the head: wake it if the drop above made it the
-- head, and try again at the latest when its deadline passes.
if head ~= head0 then
  redis.call('publish', ARGV[5] .. head, '1')
end
local s = redis.call('zscore', KEYS[3], head)
local d = 1
if s then
  d = tonumber(s) - now
end
if d < 1 then
  d = 1
end
return {0, d}
