package lua

// The scripts of the MultiLock: several reentrant locks in Redisson's RLock
// format taken as one, one script per Redis Cluster slot.
var (
	MultiLock   = LoadWith("multi_lock.lua", "fence.lua")
	MultiUnlock = Load("multi_unlock.lua")
	MultiRenew  = Load("multi_renew.lua")
)
