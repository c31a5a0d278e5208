-- Extends an owner's write lease on an RWMutex while it still holds it.
--
-- KEYS[1]  the lock's hash
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds
--
-- Returns 1 when renewed, 0 when the owner no longer holds the write lock.
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], 'w:' .. ARGV[1]) == 0 then
  return 0
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
