-- The term of a new leader of an election (elect_campaign.lua): the one
-- place terms are made. lua/elect.go puts this file before the scripts
-- that use it (it is not run on its own).
--
-- next_term returns the next term of the counter at key, which never
-- expires, and stores it there: strictly greater than every term given
-- before. A counter of another type fails with WRONGTYPE, one that is not
-- an integer as INCR fails, and nothing is written either way.
--
-- Terms are fencing tokens, and follow the rule of the locks' tokens
-- (WithFencing): should that rule change (say, never below Redis's clock,
-- so that tokens keep increasing across a loss of the counter), this
-- function is where terms adopt it.
local function next_term(key)
  return redis.call('incr', key)
end
