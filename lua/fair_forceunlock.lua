-- Frees a fair lock whoever holds it and wakes the head of its queue.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the queue zset
-- ARGV[1]  channel prefix (it begins with the lock's hash tag: every
--          waiter's channel is in KEYS[1]'s slot)
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
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
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if head then
  redis.call(ARGV[2], ARGV[1] .. head, '1')
end
return 1
