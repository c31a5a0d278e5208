-- Takes or re-enters the write lock of an RWMutex.
--
-- KEYS[1..5]  hash, read holders, waiting writers, waiting readers, admitted
--              readers (see lua/rw.go)
-- KEYS[6]  optional: the fencing counter (WithFencing), a string that never
--          expires; a first write hold (ARGV[3] = 0) moves it on to the
--          next token (fence.lua) and returns it as a third reply
--          element, {1, 1, token}
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[3]  write hold count the caller had before this call (0 for a first)
-- ARGV[4]  waiter timeout in ms: on failure the caller registers as a waiting
--          writer (which holds new readers back) with a deadline that far
--          ahead; 0 = not (TryLock)
-- ARGV[5]  unused ("", or RWRLock's ARGV[5]: the two share their arguments)
-- ARGV[6]  the readers' channel (not a key: rw_prelude.lua's probe)
--
-- Granted when the owner holds the write lock (re-entry), or when no read or
-- write hold is left and no reader admitted by the last write unlock is still
-- to come. A reader may not upgrade: its own read hold keeps it waiting.
--
-- A re-entry (ARGV[3] > 0) whose write hold is gone is refused with {-1, 0},
-- never re-created.
--
-- Returns {1, count} or {0, ms}: how long to wait at most before trying again
-- (-1: the lock has no expiry).
-- (rw_prelude.lua comes first: now, purge, extend; then fence.lua.)

local field = ARGV[2]
local wf = 'w:' .. field
local lease = tonumber(ARGV[1])
local n = tonumber(ARGV[3]) + 1
if n > 1 and redis.call('hexists', KEYS[1], wf) == 0 then
  return {-1, 0}
end
-- The fencing token of a first write hold, taken before anything is
-- written (a counter of another type then fails with nothing written).
local function fence()
  if n == 1 and KEYS[6] then
    return fence_next(KEYS[6])
  end
end
local function granted(token)
  if token then
    return {1, n, token}
  end
  return {1, n}
end
local mode = redis.call('hget', KEYS[1], 'mode')
local wait
if mode == 'write' then
  if redis.call('hexists', KEYS[1], wf) == 1 then
    local token = fence()
    redis.call('hset', KEYS[1], wf, n)
    extend(KEYS[1], lease)
    redis.call('zrem', KEYS[3], field)
    return granted(token)
  end
  wait = redis.call('pttl', KEYS[1])
elseif mode == 'read' then
  wait = tonumber(redis.call('zrange', KEYS[2], 0, 0, 'withscores')[2]) - now
else
  local admitted = redis.call('zrange', KEYS[5], 0, 0, 'withscores')[2]
  if not admitted then
    local token = fence()
    redis.call('hset', KEYS[1], 'mode', 'write', wf, n)
    redis.call('pexpire', KEYS[1], lease)
    redis.call('zrem', KEYS[3], field)
    return granted(token)
  end
  wait = tonumber(admitted) - now
end

local tmo = tonumber(ARGV[4])
if tmo > 0 then
  redis.call('zadd', KEYS[3], now + tmo, field)
  extend(KEYS[3], tmo)
end
if wait ~= -1 and wait < 1 then
  wait = 1
end
return {0, wait}
