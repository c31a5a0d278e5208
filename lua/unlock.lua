-- Leaves one hold of a reentrant lock; the last one deletes the lock and
-- publishes an unlock message (Redisson's "0") on the lock's channel.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  channel (in KEYS[1]'s slot)
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller had before this call (>= 1)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5]  message
-- KEYS[3]  optional: the release record of this owner (see below)
-- ARGV[6]  with KEYS[3]: how long the record lives, in milliseconds
--
-- The count is set to ARGV[2] - 1 rather than decremented, so a call that
-- go-redis resends after a network error cannot leave twice. A last unlock
-- that finds the field gone is either such a resend of one that ran, or
-- the unlock of a hold that was lost (it expired, was forced, or Redis
-- lost it): the last unlock that releases writes the record KEYS[3], which
-- outlives any resend, and a last unlock that finds the field gone reports
-- released only if the record is there. Without KEYS[3] (a give-back,
-- whose result nobody reads) it reports released.
--
-- Returns 1 when holds remain, 2 when the lock was released (by this call
-- or, resent, by its first run), 0 when the owner's hold is gone (the
-- lease was lost; nothing changed).
local n = tonumber(ARGV[2]) - 1
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  if n > 0 or (KEYS[3] and redis.call('exists', KEYS[3]) == 0) then
    return 0
  end
  return 2
end
if n > 0 then
  redis.call('hset', KEYS[1], ARGV[1], n)
  redis.call('pexpire', KEYS[1], ARGV[3])
  return 1
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[5])
if KEYS[3] then
  redis.call('set', KEYS[3], '1', 'px', ARGV[6])
end
return 2
