-- Takes a waiter out of a fair lock's queue (its wait ended without the
-- lock). When it headed the queue of a free lock, the next waiter is woken.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the queue zset
-- KEYS[3]  the waiters' deadlines zset
-- ARGV[1]  waiter field
-- ARGV[2]  channel prefix (it begins with the lock's hash tag: every
--          waiter's channel is in KEYS[1]'s slot)
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
--
-- Returns 1 when the waiter was queued, 0 when it was not.
-- The queue's first two are read before it is changed (the second heads it
-- once the first leaves): a key this script empties is not touched again
-- (lua/lua.go).
local first = redis.call('zrange', KEYS[2], 0, 1)
local n = redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if first[1] == ARGV[1] and first[2] and redis.call('exists', KEYS[1]) == 0 then
  redis.call(ARGV[3], ARGV[2] .. first[2], '1')
end
return n
