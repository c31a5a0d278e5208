package lua

// The scripts of the FairMutex: a reentrant lock in Redisson's RLock hash
// format plus a queue of waiters, granted in arrival order. Waiter deadlines
// are taken from Redis's clock (TIME), never from a client's.
var (
	FairLock        = LoadWith("fair_lock.lua", "fence.lua")
	FairUnlock      = Load("fair_unlock.lua")
	FairLeave       = Load("fair_leave.lua")
	FairDrop        = Load("fair_drop.lua")
	FairForceUnlock = Load("fair_forceunlock.lua")
)
