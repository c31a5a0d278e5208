-- The type check of every Semaphore script (lua/semaphore.go and
-- lua/holders.go prepend it; it is not run on its own): the name's hash
-- holds "permits" and "used" only, and a hash with other fields is another
-- primitive's (a Mutex's, an RWMutex's), refused with WRONGTYPE. It only
-- reads, so it may run before redis.replicate_commands.
do
  local n = redis.call('hlen', KEYS[1])
  if n > 0 then
    local v = redis.call('hmget', KEYS[1], 'permits', 'used')
    local k = 0
    if v[1] then k = k + 1 end
    if v[2] then k = k + 1 end
    if k ~= n then
      return redis.error_reply('WRONGTYPE key is not a Semaphore')
    end
  end
end
