-- Reads a CountDownLatch's count and round together.
--
-- KEYS[1]  the latch's count (a string)
-- KEYS[2]  the latch's round (a string)
--
-- Returns {count, round}: each false when missing. A count of another type
-- fails with WRONGTYPE; a round of another type reads as missing.
local r = false
if redis.call('type', KEYS[2])['ok'] == 'string' then
  r = redis.call('get', KEYS[2])
end
return {redis.call('get', KEYS[1]), r}
