-- The term of a new leader of an election (elect_campaign.lua): the one
-- place terms are made. lua/elect.go puts this file, after fence.lua,
-- before the scripts that use it (it is not run on its own).
--
-- next_term returns the next term of the counter at key, which never
-- expires, and stores it there: strictly greater than every term given
-- before. Terms are fencing tokens, made by the rule of the locks' tokens
-- (fence.lua's fence_next: one more than the last, never below Redis's
-- clock in microseconds), so they keep increasing across a loss of the
-- counter too. A counter of another type fails with WRONGTYPE, one that is
-- not an integer as INCR fails, and nothing is written either way.
local function next_term(key)
  return fence_next(key)
end
