-- The guard of the scripts that may empty a key and touch it again: lua/rw.go
-- and lua/semaphore.go put this file first (it is not run on its own).
--
-- While a slot migrates away from its master (CLUSTER SETSLOT MIGRATING),
-- that master refuses a command on a key of the slot it does not have, even
-- one inside a script: the script fails there ("a non local key"), after
-- what it wrote before (lua/lua.go). A script runs there only when it has
-- every key it declared, so the keys it lacks are the ones it emptied
-- itself.
--
-- refuse_if_migrating raises TRYAGAIN, as Redis does for a command on keys
-- of a migrating slot some of which are missing, when this node is such a
-- master: a script that is about to empty a key it may touch again calls it
-- before it writes anything, and is sent again (by the transport) until the
-- keys have moved. probe is a name of the slot that is never a key (the
-- script's channel): on the migrating master a command on it is refused,
-- elsewhere it answers.
local function refuse_if_migrating(probe)
  if type(redis.pcall('exists', probe)) == 'table' then
    error({err = 'TRYAGAIN a key of a slot being migrated would be emptied and touched again'})
  end
end

-- probe_arg is the channel migrating.lua's probe uses: the script's last
-- ARGV, or the one before it when the last is a release's write counter,
-- an empty string (see resend.go).
local function probe_arg()
  if ARGV[#ARGV] == '' then
    return ARGV[#ARGV - 1]
  end
  return ARGV[#ARGV]
end
