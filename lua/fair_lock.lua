-- Takes, re-enters or queues for a fair lock.
--
-- KEYS[1]  the lock's hash (owner field -> hold count, PEXPIRE lease)
-- KEYS[2]  the queue: zset of waiter field -> arrival number
-- KEYS[3]  the waiters' deadlines: zset of waiter field -> ms (Redis clock)
-- KEYS[4]  optional: the fencing counter (WithFencing), a string that never
--          expires; a first hold (ARGV[3] = 0) moves it on to the next
--          token (fence.lua, prepended) and returns it as a third reply
--          element, {1, 1, token}
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client uuid>:<n>"
-- ARGV[3]  hold count the caller had before this call (0 for a first hold)
-- ARGV[4]  waiter timeout in ms: the caller joins the queue (or refreshes its
--          place) with a deadline that far ahead; 0 = do not queue (TryLock)
-- ARGV[5]  channel prefix: a waiter is woken on prefix .. field (the prefix
--          begins with the lock's hash tag: in KEYS[1]'s slot)
-- ARGV[6]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
--
-- The lock is taken when it is free and the caller heads the queue (or the
-- queue is empty). When a free lock is promised to another waiter, waiters
-- whose deadline has passed are dropped first (the head may be dead), and the
-- new head is woken if that changed it; a lock that is held, or that the
-- caller takes as head, needs no drop: the next unlock, or the next attempt
-- on the free lock, makes it before the head matters. The count is set to
-- ARGV[3] + 1 rather than incremented, and queueing twice keeps the first
-- place, so a call that go-redis resends cannot count twice.
--
-- Cost: Redis's clock (TIME) is read only to write a deadline or to drop
-- expired waiters. A free lock with no queue costs PTTL, ZRANGE, HSET and
-- PEXPIRE; a re-entry PTTL, HEXISTS, HSET and PEXPIRE; a TryLock of a held
-- lock PTTL and HEXISTS.
--
-- A re-entry (ARGV[3] > 0) whose field is gone finds the hold lost: it is
-- refused with {-1, 0}, never re-created.
--
-- Returns {1, count} when the owner holds the lock, or {0, ms}: how long the
-- caller may wait before it is worth trying again (-1: the lock has no
-- expiry). A key of another type fails with WRONGTYPE before anything is
-- written; the deadlines' key is only checked on the paths that read or
-- write it (queueing, dropping, taking as head).
redis.replicate_commands()
local field = ARGV[2]
local tmo = tonumber(ARGV[4])

local function take(queued)
  local n = tonumber(ARGV[3]) + 1
  local token
  if n == 1 and KEYS[4] then
    -- First, so that a counter of another type fails with nothing written.
    token = fence_next(KEYS[4])
  end
  if queued then
    redis.call('zrem', KEYS[3], field)
    redis.call('zrem', KEYS[2], field)
  end
  redis.call('hset', KEYS[1], field, n)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if token then
    return {1, n, token}
  end
  return {1, n}
end

local function clock()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Joins the queue at its tail, or keeps the caller's place, with a deadline
-- now + tmo; the queue's keys live as long as their latest deadline.
local function enqueue(now)
  local last = redis.call('zrange', KEYS[2], -1, -1, 'withscores')
  redis.call('zadd', KEYS[3], now + tmo, field)
  if last[1] == nil then
    redis.call('zadd', KEYS[2], 1, field)
    redis.call('pexpire', KEYS[2], tmo)
    redis.call('pexpire', KEYS[3], tmo)
    return
  end
  if last[1] ~= field and not redis.call('zscore', KEYS[2], field) then
    redis.call('zadd', KEYS[2], tonumber(last[2]) + 1, field)
  end
  -- Both keys always get the same expiry: one read covers them.
  if redis.call('pttl', KEYS[3]) < tmo then
    redis.call('pexpire', KEYS[2], tmo)
    redis.call('pexpire', KEYS[3], tmo)
  end
end

if tonumber(ARGV[3]) > 0 then
  if redis.call('hexists', KEYS[1], field) == 0 then
    return {-1, 0}
  end
  return take(false)
end

local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
  -- Held: by the caller (a re-entry; a holder is never queued), or by
  -- another owner (HEXISTS refuses a key of another type).
  if redis.call('hexists', KEYS[1], field) == 1 then
    return take(false)
  end
  if tmo > 0 then
    enqueue(clock())
  end
  return {0, pttl}
end

-- Free.
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if head == nil or head == field then
  return take(head ~= nil)
end
-- Promised to another waiter: drop the expired ones first.
local now = clock()
local moved = false
local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)
if #dead > 0 then
  for _, f in ipairs(dead) do
    redis.call('zrem', KEYS[2], f)
    redis.call('zrem', KEYS[3], f)
  end
  local h = redis.call('zrange', KEYS[2], 0, 0)[1]
  if h == nil or h == field then
    return take(h ~= nil)
  end
  moved = h ~= head
  head = h
end
if tmo > 0 then
  enqueue(now)
end
-- Wake the head if the drop above made it the head, and try again at the
-- latest when its deadline passes.
if moved then
  redis.call(ARGV[6], ARGV[5] .. head, '1')
end
local s = redis.call('zscore', KEYS[3], head)
local d = 1
if s then
  d = tonumber(s) - now
end
if d < 1 then
  d = 1
end
return {0, d}
