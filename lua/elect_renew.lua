-- Extends a leader's lease while it still leads.
--
-- KEYS[1]  the election (see elect_campaign.lua)
-- ARGV[1]  the leader's owner field
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 when renewed, 0 when the owner no longer leads.
if redis.call('hget', KEYS[1], 'owner') == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
