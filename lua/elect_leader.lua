-- Reads who leads an election, in one round trip.
--
-- KEYS[1]  the election (see elect_campaign.lua)
-- KEYS[2]  the term counter
--
-- Returns {term, value, pttl, last}: the leader's term, value and
-- remaining lease, or {0, '', -2, last} when nobody leads; last is the
-- latest term given (0: none yet). A lease that has run out is never
-- reported: Redis does not return an expired key.
local last = tonumber(redis.call('get', KEYS[2]) or '0')
local v = redis.call('hmget', KEYS[1], 'owner', 'term', 'value')
if not v[1] then
  return {0, '', -2, last}
end
return {tonumber(v[2]), v[3], redis.call('pttl', KEYS[1]), last}
