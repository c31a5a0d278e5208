-- Reports a semaphore's permits after reclaiming expired holders
-- (sem_prelude.lua describes the keys and is prepended).
--
-- KEYS[1..4]  name, {name}:holders, {name}:expiry, {name}:sem-wake channel
-- ARGV[1]     publish command ('publish' or 'spublish') for KEYS[4]
-- ARGV[2]     most expired holders to reclaim in this call
--
-- Returns {total, used, more}: total is -1 when the permits were never set;
-- more is 1 when expired holders remain to be reclaimed (call again).
local now = sem_now()
local used, stored = sem_used()
local freed, more = sem_reclaim(now, tonumber(ARGV[2]))
used = used - freed
sem_finish(used, stored, freed, ARGV[1])
local more_n = 0
if more then
  more_n = 1
end
return {tonumber(redis.call('hget', KEYS[1], 'permits') or '-1'), used, more_n}
