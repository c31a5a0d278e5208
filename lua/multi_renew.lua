-- Extends the leases of a MultiLock's locks of one slot while its owner
-- still holds every one of them.
--
-- KEYS     the locks' hashes
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 when renewed, 0 when the owner no longer holds one of them
-- (nothing changed: the hold is lost, and given back whole).
for _, key in ipairs(KEYS) do
  if redis.call('hexists', key, ARGV[1]) == 0 then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('pexpire', key, ARGV[2])
end
return 1
