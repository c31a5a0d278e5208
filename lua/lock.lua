-- Takes or re-enters a reentrant lock (Redisson RLock format: a hash of
-- owner field -> hold count, with a PEXPIRE lease).
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  optional: the fencing counter (WithFencing), a string that never
--          expires; a first hold (ARGV[3] = 0) moves it on to the next
--          token (fence.lua, prepended) and returns it
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  hold count the caller had before this call (0 for a first hold)
--
-- The count is set to ARGV[3] + 1 rather than incremented, so a call that
-- go-redis resends after a network error cannot count one re-entry twice.
-- A re-entry (ARGV[3] > 0) whose field is gone finds the hold lost (a
-- force-unlock, an expiry, a failover): it is refused, never re-created.
--
-- Returns, without KEYS[2], one integer (the cheapest reply Redis makes,
-- and reads): the owner's count (>= 1) when the owner holds the lock, 0
-- when a re-entry finds its hold gone, -2 - pttl (< 0) when another owner
-- holds it. With KEYS[2]: {1, count} when the owner holds the lock ({1, 1,
-- token} for a first hold; the counter is moved on before the hash is
-- written, so a counter of another type fails with nothing written), {-1,
-- 0} when a re-entry finds its hold gone, {0, pttl} when another owner
-- does. A key of another type fails with WRONGTYPE and is not touched. A
-- free lock costs three commands; a failed attempt, the common case under
-- contention, two reads.
local pttl = redis.call('pttl', KEYS[1])
local c = tonumber(ARGV[3])
if c > 0 then
  if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    if KEYS[2] then
      return {-1, 0}
    end
    return 0
  end
elseif pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  if KEYS[2] then
    return {0, pttl}
  end
  return -2 - pttl
end
local n = c + 1
if not KEYS[2] then
  redis.call('hset', KEYS[1], ARGV[2], n)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return n
end
local token
if n == 1 then
  token = fence_next(KEYS[2])
end
redis.call('hset', KEYS[1], ARGV[2], n)
redis.call('pexpire', KEYS[1], ARGV[1])
if token then
  return {1, n, token}
end
return {1, n}
