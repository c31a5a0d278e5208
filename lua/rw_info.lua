-- Reports the state of an RWMutex without changing it.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  zset of read holders
--
-- Returns {mode, readers}: mode 0 free, 1 read-locked, 2 write-locked;
-- readers is the number of owners whose read lease is still running.
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  return {0, 0}
end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local readers = redis.call('zcount', KEYS[2], '(' .. now, '+inf')
if mode == 'write' then
  return {2, readers}
end
if readers == 0 then
  return {0, 0}
end
return {1, readers}
