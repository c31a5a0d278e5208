-- Releases n of the permits one owner holds (sem_prelude.lua describes the
-- keys and is prepended).
--
-- KEYS[1..3]  name, {name}:holders, {name}:expiry (see sem_prelude.lua)
-- ARGV[1]     owner field
-- ARGV[2]     n, permits to release (> 0, at most ARGV[3])
-- ARGV[3]     permits the owner held before this call, as its process knows
-- ARGV[4]     publish command ('publish' or 'spublish')
-- ARGV[5]     most expired holders to reclaim in this call
-- ARGV[6]     the {name}:sem-wake channel (not a key, see lua/lua.go)
--
-- The owner's count is set to ARGV[3] - ARGV[2] (never raised) rather than
-- decremented, so a call that go-redis resends cannot release twice.
--
-- Returns 1 when the owner still holds permits, 2 when it holds none any
-- more, 3 when it held none already and was releasing its last (a resent
-- release, or a lost hold: see unlock.lua), 0 when it held none although
-- its process thought it kept some (its lease ran out): nothing changed.
local field, n, prev = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = sem_now()
local used, stored = sem_used()
local freed = sem_reclaim(now, tonumber(ARGV[5]))
used = used - freed

local held = tonumber(redis.call('hget', KEYS[2], field) or '0')
local want = prev - n
local result
if held == 0 then
  -- Gone: a lost lease, or this very call resent after it released the
  -- owner's last permits.
  if want > 0 then
    result = 0
  else
    result = 3
  end
else
  local keep = math.min(held, want)
  if keep > 0 then
    redis.call('hset', KEYS[2], field, keep)
    result = 1
  else
    sem_drop(field)
    result = 2
  end
  used = used - (held - keep)
  freed = freed + (held - keep)
end
sem_finish(used, stored, freed, ARGV[4], ARGV[6])
return result
