-- Takes a waiter out of an RWMutex's waiting sets (its wait ended without
-- the lock). When it was the last waiting writer the readers it held back are
-- woken; when it was the last admitted reader of a free lock, a writer is.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- ARGV[1]  owner field
-- ARGV[2]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[3..4]  readers' and writers' channels (not keys, see lua/lua.go)
--
-- Returns 1 when the waiter was registered, 0 when it was not.
-- (rw_prelude.lua comes first: now, purge, extend.)

local field = ARGV[1]
-- The sets are counted before they change: a key this script empties is
-- not touched again (lua/lua.go).
local writers = redis.call('zcard', KEYS[3])
local admits = redis.call('zcard', KEYS[5])
local writer = redis.call('zrem', KEYS[3], field)
local reader = redis.call('zrem', KEYS[4], field)
local admitted = redis.call('zrem', KEYS[5], field)
if writer == 1 and writers == 1 then
  redis.call(ARGV[2], ARGV[3], '1')
end
if admitted == 1 and admits == 1 and redis.call('exists', KEYS[1]) == 0 then
  redis.call(ARGV[2], ARGV[4], '1')
end
if writer + reader + admitted > 0 then
  return 1
end
return 0
