-- Takes or re-enters the read lock of an RWMutex.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[3]  read hold count the caller had before this call (0 for a first)
-- ARGV[4]  waiter timeout in ms: on failure the caller registers as a reader
--          waiting behind a writer, with a deadline that far ahead; 0 = not
--          (TryRLock)
-- ARGV[5]  for a downgrade, the field of the caller's write hold (its read
--          hold has a field of its own); "" otherwise
-- ARGV[6]  the readers' channel (not a key: rw_prelude.lua's probe)
--
-- Granted when the caller already holds the read lock (re-entry, in either
-- mode: a downgraded read hold re-enters while its owner still holds the
-- write lock), or holds the write lock (downgrade), or when nobody holds the
-- write lock and either no writer waits or a write unlock admitted this
-- reader. The count is set to ARGV[3] + 1 so a resent call cannot count
-- twice.
--
-- A re-entry (ARGV[3] > 0) whose read hold is gone (its lease ran out, a
-- force-unlock) is refused with {-1, 0}, never re-created; one whose read
-- hold is there is always granted.
--
-- Returns {1, count} or {0, ms}: how long to wait at most before trying again
-- (-1: the write lock has no expiry).
-- (rw_prelude.lua comes first: now, purge, extend.)

local field = ARGV[2]
local rf = 'r:' .. field
local holds = redis.call('hexists', KEYS[1], rf) == 1
if tonumber(ARGV[3]) > 0 and not holds then
  return {-1, 0}
end
local mode = redis.call('hget', KEYS[1], 'mode')
local grant
local writer = ARGV[5]
if holds then
  grant = true
elseif mode == 'write' then
  grant = writer ~= nil and writer ~= '' and redis.call('hexists', KEYS[1], 'w:' .. writer) == 1
else
  grant = redis.call('zcard', KEYS[3]) == 0
    or redis.call('zscore', KEYS[5], field) ~= false
end
if grant then
  local n = tonumber(ARGV[3]) + 1
  local lease = tonumber(ARGV[1])
  if not mode then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  redis.call('hset', KEYS[1], rf, n)
  redis.call('zadd', KEYS[2], now + lease, field)
  extend(KEYS[1], lease)
  extend(KEYS[2], lease)
  redis.call('zrem', KEYS[4], field)
  redis.call('zrem', KEYS[5], field)
  return {1, n}
end

local tmo = tonumber(ARGV[4])
if tmo > 0 then
  redis.call('zadd', KEYS[4], now + tmo, field)
  extend(KEYS[4], tmo)
end
if mode == 'write' then
  return {0, redis.call('pttl', KEYS[1])}
end
-- Behind waiting writers: at the latest when the first of them times out.
local d = tonumber(redis.call('zrange', KEYS[3], 0, 0, 'withscores')[2]) - now
if d < 1 then
  d = 1
end
return {0, d}
