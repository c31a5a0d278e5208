package lua

// The scripts of the RWMutex. Its keys (all in the lock name's hash tag slot):
//
//	KEYS[1]  hash at the lock's name: "mode" -> "read" | "write",
//	         "w:<field>" -> write hold count, "r:<field>" -> read hold count
//	KEYS[2]  zset of read holders: field -> lease deadline (ms, Redis clock)
//	KEYS[3]  zset of waiting writers: field -> deadline (ms, Redis clock)
//	KEYS[4]  zset of readers waiting behind a writer: field -> deadline
//	KEYS[5]  zset of readers admitted by a write unlock: field -> deadline
var (
	RWRLock      = loadRW("rw_rlock.lua")
	RWRUnlock    = loadRW("rw_runlock.lua")
	RWLock       = loadRW("rw_lock.lua", "fence.lua")
	RWUnlock     = loadRW("rw_unlock.lua")
	RWRenewRead  = Load("rw_renew_read.lua")
	RWRenewWrite = Load("rw_renew_write.lua")
	RWLeave      = loadRW("rw_leave.lua")
	RWForce      = Load("rw_forceunlock.lua")
	RWInfo       = Load("rw_info.lua")
)

// loadRW returns a state-changing RWMutex script with rw_prelude.lua (and
// then more, if given) before it.
func loadRW(name string, more ...string) *Script {
	return LoadWith(name, append([]string{"migrating.lua", "rw_prelude.lua"}, more...)...)
}
