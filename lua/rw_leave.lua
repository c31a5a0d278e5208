-- Takes a waiter out of an RWMutex's waiting sets (its wait ended without
-- the lock). When it was the last waiting writer the readers it held back are
-- woken; when it was the last admitted reader of a free lock, a writer is.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- ARGV[1]  owner field
-- ARGV[2]  readers' channel
-- ARGV[3]  writers' channel
--
-- Returns 1 when the waiter was registered, 0 when it was not.
-- (rw_prelude.lua comes first: now, purge, extend.)
  for _, f in ipairs(redis.call('zrangebyscore', KEYS[2], '-inf', now)) do
    redis.call('hdel', KEYS[1], 'r:' .. f)
    redis.call('zrem', KEYS[2], f)
  end
  for i = 3, 5 do
    redis.call('zremrangebyscore', KEYS[i], '-inf', now)
  end
  if redis.call('exists', KEYS[1]) == 0 then
    redis.call('del', KEYS[2])
  elseif redis.call('hget', KEYS[1], 'mode') == 'read' and redis.call('zcard', KEYS[2]) == 0 then
    redis.call('del', KEYS[1])
  end
end

-- Makes key k live at least ms longer.
local function extend(k, ms)
  if redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end

redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
purge(now)

local field = ARGV[1]
local writer = redis.call('zrem', KEYS[3], field)
local reader = redis.call('zrem', KEYS[4], field)
local admitted = redis.call('zrem', KEYS[5], field)
if writer == 1 and redis.call('zcard', KEYS[3]) == 0 then
  redis.call('publish', ARGV[2], '1')
end
if admitted == 1 and redis.call('zcard', KEYS[5]) == 0 and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', ARGV[3], '1')
end
if writer + reader + admitted > 0 then
  return 1
end
return 0
