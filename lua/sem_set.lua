-- Sets or changes the total permits of a semaphore (sem_prelude.lua
-- describes the keys and is prepended).
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     mode: "set" (always), "try" (only if never set), "add"
--             (add ARGV[2], which may be negative, to the total; a
--             semaphore never set counts as 0)
-- ARGV[2]     n
-- ARGV[3]     publish command ('publish' or 'spublish')
-- ARGV[4]     most expired holders to reclaim in this call
-- ARGV[5]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- Returns {1, total} when the total was set; {0, total} when mode "try"
-- found it already set; {-1, used} when mode "add" would leave the total
-- below the permits in use (or below 0): nothing changed.
local mode, n = ARGV[1], tonumber(ARGV[2])
local now = sem_now()
local used, stored = sem_used()
local freed = sem_reclaim(now, tonumber(ARGV[4]))
used = used - freed

local permits = redis.call('hget', KEYS[1], 'permits')
local result
if mode == 'try' and permits then
  result = {0, tonumber(permits)}
else
  local total = n
  if mode == 'add' then
    total = tonumber(permits or '0') + n
  end
  if mode == 'add' and (total < used or total < 0) then
    result = {-1, used}
  else
    redis.call('hset', KEYS[1], 'permits', total)
    result = {1, total}
    -- Wake as many waiters as permits are free now.
    freed = math.max(total - used, 0)
  end
end
sem_finish(used, stored, freed, ARGV[3], ARGV[5])
return result
