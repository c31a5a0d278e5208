-- Deletes a CountDownLatch whatever its count, ending its round, and tells
-- every waiter, as reaching zero does.
--
-- KEYS[1]  the latch's count (a string)
-- KEYS[2]  the latch's round (a string)
-- ARGV[1]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[2]  channel (in KEYS[1]'s slot; not a key, see lua/lua.go)
--
-- Returns 1 when the latch was counting, 0 when it was not. A key of
-- another type fails with WRONGTYPE and is kept.
local t = redis.call('type', KEYS[1])['ok']
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('WRONGTYPE key is not a latch')
end
if redis.call('type', KEYS[2])['ok'] == 'string' then
  redis.call('del', KEYS[2])
end
if t == 'none' then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], ARGV[2], '0')
return 1
