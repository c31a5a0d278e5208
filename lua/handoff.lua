-- Hands a reentrant lock from the owner releasing its last hold straight to
-- a waiter of the same process (cohort handoff): the lock is never free in
-- between (the key is never even empty), and nothing is published. At the end of a run of such handoffs
-- (ARGV[4] set), the lock is released for real instead, with its unlock
-- message, if another client waits for it: some other subscriber listens
-- on its channel.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  optional: the fencing counter (WithFencing); the receiver's is a
--          first hold, so it is moved on to the next token (fence.lua,
--          prepended) and returned
-- ARGV[1]  the releasing owner's field
-- ARGV[2]  the receiving owner's field
-- ARGV[3]  the receiving owner's lease in milliseconds
-- ARGV[4]  "" within the run's bound; at its end, how to count the
--          channel's subscribers: "numsub", "shardnumsub", or "any" when
--          they cannot be counted here (then others are assumed to wait)
-- ARGV[5]  publish command: "publish" or "spublish"
-- ARGV[6]  unlock message
-- ARGV[7]  the releasing client's own subscriptions to the channel (0 or 1)
-- ARGV[8]  the lock's channel (in the lock's slot; not a key, see lua/lua.go)
--
-- A releasing owner whose field is gone (its lease was lost) has nothing to
-- hand over: the receiver gets the lock only if it is free, as its own
-- attempt would, and the reply says that the releaser's hold was gone. A
-- resent call finds the receiver holding and reports it, as the first run
-- did.
--
-- Returns {code, n, token, gone}: {1, 1, token, gone} when the receiver
-- holds the lock with one hold (token 0 without KEYS[2]; a resent call
-- reads the counter, which nobody else can have changed since, as the
-- receiver holds the lock), {2, 0, 0, gone} when the lock was released for
-- other clients, {0, pttl, 0, 1} when another owner holds it (nothing
-- changed); gone is 1 when the releaser's hold was already gone (lost),
-- 0 otherwise. A key of another type fails with WRONGTYPE and is not
-- touched.

-- The common case, the releaser still holding, costs one read.
local received = false
local gone = 0
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  received = redis.call('hexists', KEYS[1], ARGV[2]) == 1
  if not received then
    gone = 1
    local pttl = redis.call('pttl', KEYS[1])
    if pttl ~= -2 then
      return {0, pttl, 0, 1}
    end
  end
end
if ARGV[4] ~= '' and not received then
  local others = 1
  if ARGV[4] ~= 'any' then
    others = redis.call('pubsub', ARGV[4], ARGV[8])[2] - tonumber(ARGV[7])
  end
  if others > 0 then
    redis.call('del', KEYS[1])
    redis.call(ARGV[5], ARGV[8], ARGV[6])
    return {2, 0, 0, gone}
  end
end
local token = 0
if KEYS[2] then
  if received then
    token = tonumber(redis.call('get', KEYS[2]))
  else
    token = fence_next(KEYS[2])
  end
end
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('pexpire', KEYS[1], ARGV[3])
return {1, 1, token, gone}
