-- The fencing token of a first hold (WithFencing): lua/lua.go puts this
-- file before the scripts that give one (it is not run on its own).
--
-- fence_next returns the next token of the counter at key and stores it
-- there: one more than the last token, and never lower than Redis's clock
-- in microseconds (TIME). In the normal case tokens go up by one (or jump
-- to the clock); a counter lost with Redis's data (a restart without
-- persistence, a failover to a replica that did not have it) starts again
-- at the clock, above every token given before it, as long as the clock
-- reads later than when the last of them was given. A counter of another
-- type fails with WRONGTYPE, one that is not an integer as INCR fails, and
-- nothing is written either way.
local function fence_next(key)
  -- TIME before a write: effects replication (the default since Redis 5).
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local v = redis.call('get', key)
  local last = tonumber(v or '0')
  if not last or last ~= math.floor(last) then
    return redis.call('incr', key) -- fails: not an integer
  end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = math.max(last + 1, now)
  redis.call('set', key, string.format('%d', token))
  return token
end
