-- Deletes a CountDownLatch whatever its count and tells every waiter, as
-- reaching zero does.
--
-- KEYS[1]  the latch's count (a string)
-- ARGV[1]  channel
--
-- Returns 1 when the latch was counting, 0 when it was not. A key of
-- another type fails with WRONGTYPE and is kept.
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
  return 0
end
if t ~= 'string' then
  return redis.error_reply('WRONGTYPE key is not a latch')
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[1], '0')
return 1
