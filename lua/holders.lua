-- Lists the holders of a reentrant lock (Mutex, FairMutex: Redisson's RLock
-- format, a hash of owner field -> hold count with a PEXPIRE lease),
-- without changing anything.
--
-- KEYS[1]  the lock's hash
--
-- Returns {pttl, field, count, field, count, ...}: pttl is the lock's
-- remaining lease in ms (-2: free, -1: no expiry). A key of another type,
-- or a hash with a field that is not an owner's ("<client id>:<n>": an
-- RWMutex's, a Semaphore's), fails with WRONGTYPE.
local all = redis.call('hgetall', KEYS[1])
for i = 1, #all, 2 do
  if not string.find(all[i], ':', 1, true) then
    return redis.error_reply('WRONGTYPE key is not a reentrant lock')
  end
end
table.insert(all, 1, redis.call('pttl', KEYS[1]))
return all
