-- Releases every permit one owner holds (used by Client.Close and when a
-- hold cannot be registered). sem_prelude.lua is prepended.
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     owner field
-- ARGV[2]     publish command ('publish' or 'spublish')
-- ARGV[3]     most expired holders to reclaim in this call
-- ARGV[4]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- Returns the number of permits released (0 when the owner held none).
local field = ARGV[1]
local now = sem_now()
local used, stored = sem_used()
local freed = sem_reclaim(now, tonumber(ARGV[3]))
used = used - freed

local held = tonumber(redis.call('hget', KEYS[2], field) or '0')
if held > 0 then
  sem_drop(field)
  used = used - held
  freed = freed + held
end
sem_finish(used, stored, freed, ARGV[2], ARGV[4])
return held
