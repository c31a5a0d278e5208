-- Releases every hold one owner has on a reentrant lock (used by Close).
--
-- KEYS[1]  the lock's hash
-- ARGV[1]  owner field
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[3]  message
-- ARGV[4]  channel (in KEYS[1]'s slot; not a key, see lua/lua.go)
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
redis.call(ARGV[2], ARGV[4], ARGV[3])
return 1
