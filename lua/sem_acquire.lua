-- Acquires n more permits of a semaphore for one owner (sem_prelude.lua
-- describes the keys and is prepended).
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     owner field "<client uuid>:<n>"
-- ARGV[2]     n, permits to acquire (> 0)
-- ARGV[3]     permits the owner held before this call, as its process knows
-- ARGV[4]     lease in milliseconds
-- ARGV[5]     publish command ('publish' or 'spublish')
-- ARGV[6]     most expired holders to reclaim in this call
-- ARGV[7]     the total the caller states (WithPermits), set when the
--             semaphore has none (never set, or lost with Redis's data);
--             0: none stated, a missing total stays missing. A total that
--             is set is never changed here.
-- ARGV[8]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- The owner's count is set to ARGV[3] + ARGV[2] rather than incremented, so
-- a call that go-redis resends after a network error cannot take twice; a
-- stale entry of the same owner (a hold its process already gave up as
-- lost) is replaced, not added to.
--
-- Returns {1, held, 1} when the owner now holds `held` permits; {0, bound,
-- set} when too few are free, bound being sem_bound's wait in ms and set 0
-- when the permits were never set (1 otherwise); {-1, 0, 1} when the
-- owner's earlier permits are no longer held (its lease ran out): nothing
-- changed.
local field, n, prev, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = sem_now()
local used, stored = sem_used()
local freed, more = sem_reclaim(now, tonumber(ARGV[6]))
used = used - freed

local held = tonumber(redis.call('hget', KEYS[2], field) or '0')
local result
local created -- the total this call set (WithPermits), or nil
if prev > 0 and held == 0 then
  result = {-1, 0, 1}
else
  local want = prev + n
  local delta = want - held
  local permits = redis.call('hget', KEYS[1], 'permits')
  local stated = tonumber(ARGV[7] or '0')
  if not permits and stated > 0 then
    redis.call('hset', KEYS[1], 'permits', stated)
    permits = stated
    created = stated
  end
  if delta > 0 and (not permits or delta > tonumber(permits) - used) then
    local set = 1
    if not permits then
      set = 0
    end
    result = {0, sem_bound(now, more), set}
  else
    redis.call('hset', KEYS[2], field, want)
    sem_lease(field, now, lease)
    used = used + delta
    if delta < 0 then
      freed = freed - delta
    end
    result = {1, want, 1}
  end
end
if created then
  -- Wake as many waiters as permits are free now (as sem_set.lua does).
  freed = math.max(created - used, 0)
end
sem_finish(used, stored, freed, ARGV[5], ARGV[8])
return result
