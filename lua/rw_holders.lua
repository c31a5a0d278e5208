-- Lists the holders of an RWMutex without changing anything (lua/rw.go
-- describes its keys).
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  zset of read holders: field -> lease deadline (ms, Redis clock)
--
-- Returns {write, field, count, lease, ...}, four elements per hold: write
-- is 1 for a write hold and 0 for a read hold, lease the ms left of its
-- lease (a write hold's is the hash's PTTL, -1 when it has no expiry; a
-- read hold's its own). Read holds whose lease has run out (not yet purged)
-- are left out. A hash without a mode is another primitive's: WRONGTYPE.
local all = redis.call('hgetall', KEYS[1])
if #all == 0 then
  return {}
end
if not redis.call('hget', KEYS[1], 'mode') then
  return redis.error_reply('WRONGTYPE key is not an RWMutex')
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('pttl', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local kind, field = string.sub(all[i], 1, 2), string.sub(all[i], 3)
  if kind == 'w:' then
    table.insert(out, 1)
    table.insert(out, field)
    table.insert(out, tonumber(all[i + 1]))
    table.insert(out, pttl)
  elseif kind == 'r:' then
    local until_ms = redis.call('zscore', KEYS[2], field)
    if until_ms and tonumber(until_ms) > now then
      table.insert(out, 0)
      table.insert(out, field)
      table.insert(out, tonumber(all[i + 1]))
      table.insert(out, tonumber(until_ms) - now)
    end
  end
end
return out
