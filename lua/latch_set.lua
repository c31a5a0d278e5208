-- Begins a round of a CountDownLatch unless one is being counted.
--
-- KEYS[1]  the latch's count (a string)
-- KEYS[2]  the latch's round (a string)
-- ARGV[1]  the count, > 0
-- ARGV[2]  the new round's identity, unique to this call
--
-- Returns 1 when the round began, 0 when the latch was already counting. A
-- count or round key of another type fails with WRONGTYPE and is kept.
local c = redis.call('type', KEYS[1])['ok']
if c == 'string' then
  return 0
elseif c ~= 'none' then
  return redis.error_reply('WRONGTYPE key is not a latch')
end
local t = redis.call('type', KEYS[2])['ok']
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('WRONGTYPE key is not a latch round')
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
