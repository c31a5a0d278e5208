-- Counts a CountDownLatch down by one; at zero the round ends: its keys are
-- removed and every waiter is told.
--
-- KEYS[1]  the latch's count (a string)
-- KEYS[2]  the latch's round (a string)
-- ARGV[1]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[2]  channel (in KEYS[1]'s slot; not a key, see lua/lua.go)
--
-- Returns the count left (0 when the latch was not counting: nothing
-- changed). A key of another type fails with WRONGTYPE and is not touched.
local v = redis.call('get', KEYS[1])
if not v then
  return 0
end
local n = redis.call('decr', KEYS[1])
if n <= 0 then
  redis.call('del', KEYS[1])
  if redis.call('type', KEYS[2])['ok'] == 'string' then
    redis.call('del', KEYS[2])
  end
  redis.call(ARGV[1], ARGV[2], '0')
  return 0
end
return n
