-- Begins a round of a CountDownLatch unless one is being counted.
--
-- KEYS[1]  the latch's count (a string)
-- KEYS[2]  the latch's round (a string)
-- ARGV[1]  the count, > 0
-- ARGV[2]  the new round's identity, unique to this call
--
-- Returns 1 when the round began, 0 when the latch was already counting (or
-- its name holds another key: nothing changed). A round key of another type
-- fails with WRONGTYPE and is kept.
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
local t = redis.call('type', KEYS[2])['ok']
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('WRONGTYPE key is not a latch round')
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
