-- Frees a reentrant lock whoever holds it and wakes its waiters.
--
-- KEYS[1]  the lock's hash
-- ARGV[1]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[2]  message
-- ARGV[3]  channel (in KEYS[1]'s slot; not a key, see lua/lua.go)
--
-- Returns 1 when a lock was freed, 0 when it was free. A key of another type
-- is refused with WRONGTYPE and kept.
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
  return 0
end
if t ~= 'hash' then
  return redis.error_reply('WRONGTYPE key is not a lock')
end
-- An RWMutex's or a Semaphore's hash is not freed as a lock.
local other = redis.call('hmget', KEYS[1], 'mode', 'permits', 'used')
if other[1] or other[2] or other[3] then
  return redis.error_reply('WRONGTYPE key is another kind of lock')
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], ARGV[3], ARGV[2])
return 1
