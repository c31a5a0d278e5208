-- Extends the lease of one owner's permits while it still holds them
-- (sem_prelude.lua describes the keys and is prepended).
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     owner field
-- ARGV[2]     lease in milliseconds
-- ARGV[3]     publish command ('publish' or 'spublish')
-- ARGV[4]     most expired holders to reclaim in this call
-- ARGV[5]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- Returns 1 when renewed, 0 when the owner holds no permits (a lease that
-- has already run out is never extended).
local field, lease = ARGV[1], tonumber(ARGV[2])
local now = sem_now()
local used, stored = sem_used()
local freed = sem_reclaim(now, tonumber(ARGV[4]))
used = used - freed

local result = 0
local expiry = redis.call('zscore', KEYS[3], field)
if expiry and tonumber(expiry) > now and redis.call('hexists', KEYS[2], field) == 1 then
  sem_lease(field, now, lease)
  result = 1
end
sem_finish(used, stored, freed, ARGV[3], ARGV[5])
return result
