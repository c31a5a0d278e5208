package lua

// The scripts that list who holds a lock (Holders), one per storage
// format; none of them writes.
var (
	Holders    = Load("holders.lua")
	RWHolders  = Load("rw_holders.lua")
	SemHolders = LoadWith("sem_holders.lua", "sem_type.lua")
)
