-- The start of every RWMutex script that changes state (lua/rw.go puts it
-- before each, after migrating.lua): Redis's clock in ms as now, and read
-- holds whose lease ran out and waiters whose deadline passed already
-- dropped. Each of those scripts takes a channel of the lock as its last
-- ARGV (migrating.lua's probe).
--
-- Drops read holds whose lease ran out and waiters whose deadline passed,
-- and frees the lock when no hold is left. When that would empty one of the
-- sets, which the script then touches again, it is refused first on a
-- master the lock's slot is migrating away from (migrating.lua).
local function purge(now)
  local expired = redis.call('zrangebyscore', KEYS[2], '-inf', now)
  local dead = {}
  local empties = #expired > 0 and #expired == redis.call('zcard', KEYS[2])
  for i = 3, 5 do
    dead[i] = redis.call('zcount', KEYS[i], '-inf', now)
    empties = empties or dead[i] > 0 and dead[i] == redis.call('zcard', KEYS[i])
  end
  if empties then
    refuse_if_migrating(probe_arg())
  end
  for _, f in ipairs(expired) do
    redis.call('hdel', KEYS[1], 'r:' .. f)
    redis.call('zrem', KEYS[2], f)
  end
  for i = 3, 5 do
    if dead[i] > 0 then
      redis.call('zremrangebyscore', KEYS[i], '-inf', now)
    end
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

-- A hash at the name without a mode is another primitive's (a Mutex's, a
-- Semaphore's): refused, never taken as a free RW lock.
if redis.call('exists', KEYS[1]) == 1 and not redis.call('hget', KEYS[1], 'mode') then
  return redis.error_reply('WRONGTYPE key is not an RWMutex')
end

redis.replicate_commands()
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
purge(now)
