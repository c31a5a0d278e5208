-- Frees an RWMutex whoever holds it (every read and write hold) and wakes its
-- waiters. Waiting writers and readers keep their registrations.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  zset of read holders
-- ARGV[1]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[2]  readers' channel (not a key, see lua/lua.go)
-- ARGV[3]  writers' channel
--
-- Returns 1 when a lock was freed, 0 when it was free. A key of another type
-- is refused with WRONGTYPE and kept.
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
  redis.call('del', KEYS[2])
  return 0
end
if t ~= 'hash' or not redis.call('hget', KEYS[1], 'mode') then
  return redis.error_reply('WRONGTYPE key is not an RWMutex')
end
redis.call('del', KEYS[1], KEYS[2])
redis.call(ARGV[1], ARGV[2], '1')
redis.call(ARGV[1], ARGV[3], '1')
return 1
