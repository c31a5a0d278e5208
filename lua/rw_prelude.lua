-- The start of every RWMutex script that changes state (lua/rw.go puts it
-- before each): Redis's clock in ms as now, and read holds whose lease ran
-- out and waiters whose deadline passed already dropped.
--
-- Drops read holds whose lease ran out and waiters whose deadline passed,
-- and frees the lock when no hold is left.
local function purge(now)
