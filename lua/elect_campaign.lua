-- Wins an election for a candidate if nobody leads it.
--
-- KEYS[1]  the election: a hash of owner (the leader's field), value and
--          term, with a PEXPIRE lease; it exists exactly while someone
--          leads
-- KEYS[2]  the term counter (elect_term.lua), which never expires; its
--          terms follow fence.lua's rule, so they are large numbers
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the candidate's owner field "<client uuid>:<n>"
-- ARGV[3]  the candidate's value
-- ARGV[4]  publish command: 'publish' (classic pub/sub) or 'spublish' (sharded)
-- ARGV[5]  the election's channel (in KEYS[1]'s slot; not a key, see
--          lua/lua.go)
--
-- A win takes the next term, writes the election and publishes
-- "<term> <value>" on the channel. A candidate that finds itself leading
-- already (an earlier attempt whose reply was lost) keeps its term, and
-- publishes nothing again.
--
-- Returns {1, 1, term} when the candidate leads, {0, pttl} when another
-- does (pttl: the leader's remaining lease). A key of another type fails
-- with WRONGTYPE and nothing is written; so does a hash without an owner
-- (not an election), which counts as led for good ({0, -1}).
local owner = redis.call('hget', KEYS[1], 'owner')
if owner == ARGV[2] then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, 1, tonumber(redis.call('hget', KEYS[1], 'term'))}
end
if owner or redis.call('exists', KEYS[1]) == 1 then
  return {0, redis.call('pttl', KEYS[1])}
end
local term = next_term(KEYS[2])
redis.call('hset', KEYS[1], 'owner', ARGV[2], 'value', ARGV[3], 'term', string.format('%d', term))
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call(ARGV[4], ARGV[5], string.format('%d', term) .. ' ' .. ARGV[3])
return {1, 1, term}
