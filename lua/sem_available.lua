-- Reports a semaphore's permits after reclaiming expired holders
-- (sem_prelude.lua describes the keys and is prepended).
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     publish command ('publish' or 'spublish')
-- ARGV[2]     most expired holders to reclaim in this call
-- ARGV[3]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- Returns {total, used, more}: total is -1 when the permits were never set;
-- more is 1 when expired holders remain to be reclaimed (call again).
local now = sem_now()
local used, stored = sem_used()
local freed, more = sem_reclaim(now, tonumber(ARGV[2]))
used = used - freed
-- Read before sem_finish, which may empty the name's hash (a total never
-- set): a key this script empties is not touched again (lua/lua.go).
local permits = tonumber(redis.call('hget', KEYS[1], 'permits') or '-1')
sem_finish(used, stored, freed, ARGV[1], ARGV[3])
local more_n = 0
if more then
  more_n = 1
end
return {permits, used, more_n}
