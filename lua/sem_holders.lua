-- Lists the holders of a Semaphore's permits without changing anything
-- (sem_prelude.lua describes the keys; it is not prepended: this script
-- writes nothing).
--
-- KEYS[1]  the semaphore's name: a hash of "permits" and "used"
-- KEYS[2]  {name}:holders: a hash of owner field -> permits it holds
-- KEYS[3]  {name}:expiry: a sorted set of owner field -> lease expiry (ms,
--          Redis's clock)
--
-- Returns {field, permits, lease, ...}, three elements per holder, lease
-- being the ms left of its lease. Holders whose lease has run out (not yet
-- reclaimed) are left out. A name's hash with other fields than "permits"
-- and "used" is another primitive's: WRONGTYPE (sem_type.lua, prepended).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('hgetall', KEYS[2])
local out = {}
for i = 1, #all, 2 do
  local until_ms = redis.call('zscore', KEYS[3], all[i])
  if until_ms and tonumber(until_ms) > now then
    table.insert(out, all[i])
    table.insert(out, tonumber(all[i + 1]))
    table.insert(out, tonumber(until_ms) - now)
  end
end
return out
