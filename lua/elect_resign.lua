-- Ends a leadership: Resign, and the give-back of one that ended
-- (its context ended, its lease was lost, Close). Harmless when it has
-- ended in Redis already.
--
-- KEYS[1]  the election (see elect_campaign.lua)
-- KEYS[2]  the term counter
-- KEYS[3]  the election's channel
-- KEYS[4]  optional (Resign): the release record of this owner (see below)
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its term, or 0 when not known
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[4]  with KEYS[4]: how long the record lives, in milliseconds
--
-- While the owner leads, the election is deleted and "<term>" (that term
-- ended, nobody leads) is published, which wakes the candidates. When its
-- lease ran out in Redis already and no later term was given, nobody has
-- said so yet: "<term>" is published then too (observers drop what they
-- have heard already). A Resign that finds the owner gone is either a
-- resend (by go-redis, after a network error) of one that ran, or the
-- Resign of a leadership that was lost: as in unlock.lua, the one that
-- ends the leadership writes the record KEYS[4], which outlives any
-- resend, and one that finds the owner gone reports released only if the
-- record is there (without KEYS[4], released).
--
-- Returns 2 when the leadership was ended (by this call or, resent, by its
-- first run), 0 when it had been lost.
local term = redis.call('hget', KEYS[1], 'term')
if redis.call('hget', KEYS[1], 'owner') == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[3], term)
  if KEYS[4] then
    redis.call('set', KEYS[4], '1', 'px', ARGV[4])
  end
  return 2
end
if term == false and redis.call('exists', KEYS[1]) == 0 and redis.call('get', KEYS[2]) == ARGV[2] then
  redis.call(ARGV[3], KEYS[3], ARGV[2])
end
if KEYS[4] and redis.call('exists', KEYS[4]) == 0 then
  return 0
end
return 2
