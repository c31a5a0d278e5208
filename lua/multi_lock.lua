-- Takes or re-enters, all or none, the reentrant locks of one Redis
-- Cluster slot (or of a single node) for one owner: a MultiLock's share
-- of them. Each lock is an ordinary Redisson RLock (a hash of owner field
-- -> hold count, with a PEXPIRE lease), so a Mutex or a Redisson RLock on
-- any of the names excludes it, and it excludes them.
--
-- KEYS     the n locks' hashes; for a first hold of a fenced MultiLock
--          (WithFencing), then their fencing counters, in the same order:
--          the counters of a fenced Mutex of each name (lock.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  hold count the caller had before this call (0 for a first hold)
-- ARGV[4]  optional: n, when KEYS has the counters after the locks
--
-- Every lock is checked before any is written, so a refusal (or a key of
-- another type, which fails with WRONGTYPE) changes nothing. Counts are
-- set to ARGV[3] + 1 rather than incremented, as in lock.lua: a resent
-- call cannot count twice, and every lock of the MultiLock keeps the same
-- count. A first hold (ARGV[3] = 0) that finds its own field already
-- there (an earlier attempt whose reply was lost) adopts it. A re-entry
-- whose field is gone from any lock finds the hold lost and is refused.
--
-- A first hold with counters moves each on to its next token (fence.lua,
-- prepended), by the rule of a fenced Mutex's, after every lock and
-- every counter was checked: a counter of another type, or not an
-- integer, fails with nothing written.
--
-- Returns {1, count} when the owner holds every lock ({1, 1, token1, ...,
-- tokenN} for a first hold with counters, in the order of the locks),
-- {0, pttl, i} when KEYS[i] is held by another owner (pttl: its remaining
-- lease), {-1, 0, i} when a re-entry finds its hold gone from KEYS[i].
local first = tonumber(ARGV[3]) == 0
local n = tonumber(ARGV[4] or #KEYS)
for i = 1, n do
  local key = KEYS[i]
  if first then
    local pttl = redis.call('pttl', key)
    if pttl ~= -2 and redis.call('hexists', key, ARGV[2]) == 0 then
      return {0, pttl, i}
    end
  elseif redis.call('hexists', key, ARGV[2]) == 0 then
    return {-1, 0, i}
  end
end
local count = tonumber(ARGV[3]) + 1
local reply = {1, count}
if count == 1 and #KEYS > n then
  for i = n + 1, #KEYS do
    local v = redis.call('get', KEYS[i]) -- WRONGTYPE before anything is written
    local last = tonumber(v or '0')
    if not last or last ~= math.floor(last) then
      return redis.error_reply('ERR the fencing counter ' .. KEYS[i] .. ' is not an integer')
    end
  end
  for i = n + 1, #KEYS do
    table.insert(reply, fence_next(KEYS[i]))
  end
end
for i = 1, n do
  redis.call('hset', KEYS[i], ARGV[2], count)
  redis.call('pexpire', KEYS[i], ARGV[1])
end
return reply
