-- Ends a leadership: Resign, and the give-back of one that ended
-- (its context ended, its lease was lost, Close). Harmless when it has
-- ended in Redis already.
--
-- KEYS[1]  the election (see elect_campaign.lua)
-- KEYS[2]  the term counter
-- ARGV[1]  the leader's owner field
-- ARGV[2]  its term, or 0 when not known
-- ARGV[3]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[4]  the election's channel (not a key, see lua/lua.go)
--
-- While the owner leads, the election is deleted and "<term>" (that term
-- ended, nobody leads) is published, which wakes the candidates. When its
-- lease ran out in Redis already and no later term was given, nobody has
-- said so yet: "<term>" is published then too (observers drop what they
-- have heard already). A Resign that go-redis resends after a network
-- error finds the owner gone, as it is.
--
-- Returns 2 when the owner led, 3 when it no longer did (a resent Resign,
-- or a lost leadership: see unlock.lua).
local term = redis.call('hget', KEYS[1], 'term')
if redis.call('hget', KEYS[1], 'owner') == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], ARGV[4], term)
  return 2
end
if term == false and redis.call('exists', KEYS[1]) == 0 and redis.call('get', KEYS[2]) == ARGV[2] then
  redis.call(ARGV[3], ARGV[4], ARGV[2])
end
return 3
