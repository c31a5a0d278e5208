-- Extends the lease of a reentrant lock while its owner still holds it.
--
-- KEYS[1]  the lock's hash
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 when renewed, 0 when the owner no longer holds the lock.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
