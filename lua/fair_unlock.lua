-- Leaves one hold of a fair lock; the last one deletes the lock and wakes the
-- waiter at the head of the queue (only that one, on its own channel).
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the queue zset
-- KEYS[3]  the waiters' deadlines zset
-- ARGV[1]  owner field
-- ARGV[2]  hold count the caller had before this call (>= 1)
-- ARGV[3]  lease in milliseconds, kept while holds remain
-- ARGV[4]  channel prefix (it begins with the lock's hash tag: every
--          waiter's channel is in KEYS[1]'s slot)
-- ARGV[5]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
--
-- The count is set to ARGV[2] - 1 rather than decremented, so a call that
-- go-redis resends after a network error cannot leave twice. The lock's hash
-- only ever holds one owner's field, so the last hold is released by HDEL of
-- that field (which deletes the key).
--
-- Cost: with no queue, the last unlock is HDEL and ZRANGE only (nobody to
-- wake, no clock read). With a queue, waiters whose deadline has passed are
-- dropped first (TIME, ZRANGEBYSCORE), so the head woken is a live one.
--
-- Returns 1 when holds remain, 2 when the lock was released, 3 when the
-- last hold was already gone (a resent unlock, or a lost hold: see
-- unlock.lua), 0 when a hold that should remain
-- is gone (the lease was lost; nothing changed). A key of another type fails
-- with WRONGTYPE and is not overwritten (a foreign queue key is found only
-- after the lock's field is deleted).
redis.replicate_commands()

-- zrem_all removes members from the sorted set key, at most 1000 per ZREM
-- (Lua's stack), and stops once key is empty: a key this script empties is
-- not touched again (lua/lua.go).
local function zrem_all(key, members)
  local left = redis.call('zcard', key)
  for i = 1, #members, 1000 do
    if left == 0 then
      return
    end
    left = left - redis.call('zrem', key, unpack(members, i, math.min(i + 999, #members)))
  end
end

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
local head = redis.call('zrange', KEYS[2], 0, 0)[1]
if head == nil then
  return 2
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)
if #dead > 0 then
  -- The new head, the first live waiter, is among the queue's first
  -- #dead + 1, read before the dead leave it.
  local isdead = {}
  for _, f in ipairs(dead) do
    isdead[f] = true
  end
  head = nil
  for _, f in ipairs(redis.call('zrange', KEYS[2], 0, #dead)) do
    if not isdead[f] then
      head = f
      break
    end
  end
  zrem_all(KEYS[2], dead)
  zrem_all(KEYS[3], dead)
end
if head then
  redis.call(ARGV[5], ARGV[4] .. head, '1')
end
return 2
