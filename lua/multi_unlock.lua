-- Leaves one hold of a MultiLock's locks of one slot (see multi_lock.lua);
-- the last one frees every lock the owner still has there, each with its
-- unlock message (Redisson's "0") on its own channel. Also the give-back
-- of a hold that ended: with ARGV[2] = 1 it frees whatever the owner has
-- left, and is harmless when it has nothing.
--
-- KEYS     the n locks' hashes
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller had before this call (>= 1)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5]  message
-- ARGV[6..5+n]  their channels, in the same order (not keys, see lua/lua.go)
--
-- Counts are set to ARGV[2] - 1, as in unlock.lua: a call that go-redis
-- resends after a network error cannot leave twice, and a resent last
-- unlock finds the fields gone, as a lost hold's does (see unlock.lua).
--
-- Returns 1 when holds remain, 2 when the locks were freed, 3 when the
-- last hold was already gone from some or all of them (the others are
-- freed), 0 when a hold that
-- should remain is gone from any of them (the lease was lost; nothing
-- changed).
local n = #KEYS
local left = tonumber(ARGV[2]) - 1
if left > 0 then
  for i = 1, n do
    if redis.call('hexists', KEYS[i], ARGV[1]) == 0 then
      return 0
    end
  end
  for i = 1, n do
    redis.call('hset', KEYS[i], ARGV[1], left)
    redis.call('pexpire', KEYS[i], ARGV[3])
  end
  return 1
end
-- Each lock is read before it is changed: a key this script empties is
-- not touched again (lua/lua.go).
local result = 2
for i = 1, n do
  if redis.call('hexists', KEYS[i], ARGV[1]) == 0 then
    result = 3
  elseif redis.call('hlen', KEYS[i]) > 1 then
    redis.call('hdel', KEYS[i], ARGV[1])
  else
    redis.call('del', KEYS[i])
    redis.call(ARGV[4], ARGV[5 + i], ARGV[5])
  end
end
return result
