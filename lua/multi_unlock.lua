-- Leaves one hold of a MultiLock's locks of one slot (see multi_lock.lua);
-- the last one frees every lock the owner still has there, each with its
-- unlock message (Redisson's "0") on its own channel. Also the give-back
-- of a hold that ended: with ARGV[2] = 1 and no record it frees whatever
-- the owner has left, and is harmless when it has nothing.
--
-- KEYS     the n locks' hashes, then their n channels, in the same order;
--          then, optionally, the release record of this owner (see below)
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller had before this call (>= 1)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5]  message
-- ARGV[6]  with a record: how long it lives, in milliseconds
--
-- Counts are set to ARGV[2] - 1, as in unlock.lua. A last unlock that
-- finds the owner's field gone from any lock is either a resend (by
-- go-redis, after a network error) of one that ran, or the unlock of a
-- hold that was lost: as in unlock.lua, the last unlock that frees them
-- all writes the record, which outlives any resend, and one that finds a
-- field gone reports released only if the record is there (without a
-- record key, released). It frees what the owner still has either way.
--
-- Returns 1 when holds remain, 2 when the locks were freed (by this call
-- or, resent, by its first run), 0 when the owner's hold is gone from any
-- of them (the lease was lost; a count above 1 changes nothing).
local n = math.floor(#KEYS / 2)
local record = KEYS[2 * n + 1]
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
local had = 0
for i = 1, n do
  if redis.call('hdel', KEYS[i], ARGV[1]) == 1 then
    had = had + 1
    if redis.call('hlen', KEYS[i]) == 0 then
      redis.call('del', KEYS[i])
      redis.call(ARGV[4], KEYS[n + i], ARGV[5])
    end
  end
end
if had < n then
  if record and redis.call('exists', record) == 0 then
    return 0
  end
  return 2
end
if record then
  redis.call('set', record, '1', 'px', ARGV[6])
end
return 2
