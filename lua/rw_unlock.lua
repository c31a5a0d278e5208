-- Leaves one write hold of an RWMutex. The last one admits the readers that
-- waited for it (they go before the next writer), keeps the owner's read
-- hold if it took one (downgrade) or else frees the lock, and wakes the
-- readers and a writer.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- ARGV[1]  owner field
-- ARGV[2]  write hold count the caller had before this call (1 releases all)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5..6]  readers' and writers' channels (not keys, see lua/lua.go)
--
-- Returns 1 when holds remain, 2 when the write hold was released, 3 when
-- it was already gone (a resent release, or a lost hold: see unlock.lua),
-- 0 when a hold that should remain is gone
-- (the lease was lost; nothing changed).
-- (rw_prelude.lua comes first: now, purge, extend.)

local wf = 'w:' .. ARGV[1]
local n = tonumber(ARGV[2]) - 1
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], wf) == 0 then
  if n > 0 then
    return 0
  end
  return 3
end
if n > 0 then
  redis.call('hset', KEYS[1], wf, n)
  extend(KEYS[1], tonumber(ARGV[3]))
  return 1
end
redis.call('hdel', KEYS[1], wf)
local waiting = redis.call('zrange', KEYS[4], 0, -1, 'withscores')
if #waiting > 0 then
  local ttl = redis.call('pttl', KEYS[4])
  for i = 1, #waiting, 2 do
    redis.call('zadd', KEYS[5], waiting[i + 1], waiting[i])
  end
  redis.call('del', KEYS[4])
  extend(KEYS[5], ttl)
end
if redis.call('zcard', KEYS[2]) > 0 then
  redis.call('hset', KEYS[1], 'mode', 'read')
else
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], ARGV[6], '1')
end
redis.call(ARGV[4], ARGV[5], '1')
return 2
