-- Takes or re-enters, all or none, the reentrant locks of one Redis
-- Cluster slot (or of a single node) for one owner: a MultiLock's share
-- of them. Each lock is an ordinary Redisson RLock (a hash of owner field
-- -> hold count, with a PEXPIRE lease), so a Mutex or a Redisson RLock on
-- any of the names excludes it, and it excludes them.
--
-- KEYS     the locks' hashes
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  hold count the caller had before this call (0 for a first hold)
--
-- Every lock is checked before any is written, so a refusal (or a key of
-- another type, which fails with WRONGTYPE) changes nothing. Counts are
-- set to ARGV[3] + 1 rather than incremented, as in lock.lua: a resent
-- call cannot count twice, and every lock of the MultiLock keeps the same
-- count. A first hold (ARGV[3] = 0) that finds its own field already
-- there (an earlier attempt whose reply was lost) adopts it. A re-entry
-- whose field is gone from any lock finds the hold lost and is refused.
--
-- Returns {1, count} when the owner holds every lock, {0, pttl, i} when
-- KEYS[i] is held by another owner (pttl: its remaining lease), {-1, 0, i}
-- when a re-entry finds its hold gone from KEYS[i].
local first = tonumber(ARGV[3]) == 0
for i, key in ipairs(KEYS) do
  if first then
    local pttl = redis.call('pttl', key)
    if pttl ~= -2 and redis.call('hexists', key, ARGV[2]) == 0 then
      return {0, pttl, i}
    end
  elseif redis.call('hexists', key, ARGV[2]) == 0 then
    return {-1, 0, i}
  end
end
local n = tonumber(ARGV[3]) + 1
for _, key in ipairs(KEYS) do
  redis.call('hset', key, ARGV[2], n)
  redis.call('pexpire', key, ARGV[1])
end
return {1, n}
