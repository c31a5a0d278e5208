-- Leaves one read hold of an RWMutex; the last read hold of the lock frees it
-- and wakes a writer. Costs O(log n) in the number of read holders.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- ARGV[1]  owner field
-- ARGV[2]  read hold count the caller had before this call (1 releases all)
-- ARGV[3]  lease in milliseconds, renewed while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5..6]  readers' and writers' channels (not keys, see lua/lua.go)
--
-- Returns 1 when holds remain, 2 when the owner's read hold was released, 3
-- when it was already gone (a resent release, or a lost hold: see
-- unlock.lua), 0 when a hold that should remain is
-- gone (the lease was lost; nothing changed).
-- (rw_prelude.lua comes first: now, purge, extend.)

local field = ARGV[1]
local rf = 'r:' .. field
local n = tonumber(ARGV[2]) - 1
if redis.call('hexists', KEYS[1], rf) == 0 then
  if n > 0 then
    return 0
  end
  return 3
end
if n > 0 then
  local lease = tonumber(ARGV[3])
  redis.call('hset', KEYS[1], rf, n)
  redis.call('zadd', KEYS[2], now + lease, field)
  extend(KEYS[1], lease)
  extend(KEYS[2], lease)
  return 1
end
-- The read holders are counted before they change: a key this script
-- empties is not touched again (lua/lua.go).
local left = redis.call('zcard', KEYS[2])
redis.call('hdel', KEYS[1], rf)
left = left - redis.call('zrem', KEYS[2], field)
if redis.call('hget', KEYS[1], 'mode') == 'read' and left == 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], ARGV[6], '1')
end
return 2
