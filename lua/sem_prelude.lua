-- Shared helpers of the semaphore scripts: lua/semaphore.go prepends this
-- file to every sem_*.lua script (it is not run on its own).
--
-- A semaphore is three keys in one Redis Cluster slot:
--
-- KEYS[1]  the semaphore's name: a hash with "permits" (the total, absent
--          until set) and "used" (permits held; absent when none)
-- KEYS[2]  {name}:holders: a hash of owner field -> permits it holds
-- KEYS[3]  {name}:expiry: a sorted set of owner field -> lease expiry, in
--          milliseconds of Redis's own clock (TIME)
--
-- Each script also takes, as its last ARGV, the channel told how many
-- permits came free (in the same slot; not a key, see lua/lua.go; also
-- migrating.lua's probe).
--
-- Every script first reclaims the permits of holders whose lease has run
-- out (at most ARGV's limit of them per call, so one call's work is
-- bounded), so a crashed holder's permits come back without any sweeper.
-- The holders and expiry keys carry a TTL at least as long as every lease
-- set in them: when every holder is gone they vanish by themselves, and a
-- missing holders hash means nothing is in use.

-- Replicate the scripts' effects rather than the scripts, which read TIME
-- (the default since Redis 5; needed by Redis 3.2 to 4).
if redis.replicate_commands then
  redis.replicate_commands()
end

-- sem_now returns Redis's clock in milliseconds.
local function sem_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- sem_used returns the permits in use and the value stored in "used" (0
-- when absent), so sem_finish writes it back only when it changed.
local function sem_used()
  local stored = tonumber(redis.call('hget', KEYS[1], 'used') or '0')
  if redis.call('exists', KEYS[2]) == 0 then
    return 0, stored
  end
  if stored > 0 then
    return stored, stored
  end
  -- The name was deleted while permits were held: count them again.
  local sum = 0
  for _, v in ipairs(redis.call('hvals', KEYS[2])) do
    sum = sum + tonumber(v)
  end
  return sum, 0
end

-- sem_reclaim frees the permits of up to limit holders whose lease ended at
-- or before now. It returns the permits freed and whether more expired
-- holders may remain. When that would empty the holders or the expiry
-- set, which the script may touch again, it is refused first on a master
-- the semaphore's slot is migrating away from (migrating.lua).
local function sem_reclaim(now, limit)
  local gone = redis.call('zrangebyscore', KEYS[3], '-inf', now, 'limit', 0, limit)
  if #gone == 0 then
    return 0, false
  end
  local held = redis.call('hmget', KEYS[2], unpack(gone))
  local present = 0
  for i = 1, #gone do
    if held[i] then
      present = present + 1
    end
  end
  if #gone == redis.call('zcard', KEYS[3]) or present > 0 and present == redis.call('hlen', KEYS[2]) then
    refuse_if_migrating(probe_arg())
  end
  local freed = 0
  for i, f in ipairs(gone) do
    if held[i] then
      freed = freed + tonumber(held[i])
      redis.call('hdel', KEYS[2], f)
    end
    redis.call('zrem', KEYS[3], f)
  end
  return freed, #gone >= limit
end

-- sem_lease sets field's lease to end lease ms after now, and makes both
-- companion keys outlive it.
local function sem_lease(field, now, lease)
  redis.call('zadd', KEYS[3], now + lease, field)
  for i = 2, 3 do
    if redis.call('pttl', KEYS[i]) < lease then
      redis.call('pexpire', KEYS[i], lease)
    end
  end
end

-- sem_drop removes field from the holders.
local function sem_drop(field)
  redis.call('hdel', KEYS[2], field)
  redis.call('zrem', KEYS[3], field)
end

-- sem_bound returns how long a waiter may sleep before looking again: the
-- milliseconds until the nearest lease ends, 0 when expired holders remain
-- to be reclaimed, -1 when nobody holds a permit.
local function sem_bound(now, more)
  if more then
    return 0
  end
  local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
  if #first == 0 then
    return -1
  end
  return math.max(tonumber(first[2]) - now, 0)
end

-- sem_finish stores used if it changed and tells waiters on channel how
-- many permits came free, with publish command pub ('publish' or
-- 'spublish').
local function sem_finish(used, stored, freed, pub, channel)
  if used ~= stored then
    if used > 0 then
      redis.call('hset', KEYS[1], 'used', used)
    else
      redis.call('hdel', KEYS[1], 'used')
    end
  end
  if freed > 0 then
    redis.call(pub, channel, freed)
  end
end
