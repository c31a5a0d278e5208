-- Releases every hold one owner has on a fair lock (Close, and Unlock by an
-- owner this process does not know as a holder) and wakes the head waiter
-- when that frees the lock.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the queue zset
-- KEYS[3]  the waiters' deadlines zset
-- ARGV[1]  owner field
-- ARGV[2]  channel prefix (it begins with the lock's hash tag: every
--          waiter's channel is in KEYS[1]'s slot)
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
--
-- Returns 1 when the owner's holds were released, 0 when it held none.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
-- Read before it is changed: a key this script empties is not touched
-- again (lua/lua.go).
if redis.call('hlen', KEYS[1]) > 1 then
  redis.call('hdel', KEYS[1], ARGV[1])
  return 1
end
redis.call('del', KEYS[1])
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if head then
  redis.call(ARGV[3], ARGV[2] .. head, '1')
end
return 1
