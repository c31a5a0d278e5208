-- Leaves one hold of a reentrant lock; the last one deletes the lock and
-- publishes an unlock message (Redisson's "0") on the lock's channel.
--
-- KEYS[1]  the lock's hash
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller had before this call (>= 1)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5]  message
-- ARGV[6]  channel (in KEYS[1]'s slot; not a key, see lua/lua.go)
--
-- The count is set to ARGV[2] - 1 rather than decremented, so a call that
-- go-redis resends after a network error cannot leave twice; a resent last
-- unlock finds the field gone, as a lost hold's does: it answers 3, and
-- the caller tells the two apart (it knows whether go-redis wrote the call
-- twice, see resend.go). Further ARGV are ignored.
--
-- The last hold's field is its hash's only one (a lock has one owner at a
-- time), so its HDEL deletes the lock: one command both finds the hold
-- and frees the lock, and the key, which it may have emptied, is not
-- touched again (lua/lua.go).
--
-- Returns 1 when holds remain, 2 when the lock was released, 3 when the
-- last hold was already gone (released by this very call, resent, or
-- lost), 0 when a hold that should remain is gone (the lease was lost;
-- nothing changed).
local n = tonumber(ARGV[2]) - 1
if n > 0 then
  if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
  end
  redis.call('hset', KEYS[1], ARGV[1], n)
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
  return 3
end
redis.call(ARGV[4], ARGV[6], ARGV[5])
return 2
