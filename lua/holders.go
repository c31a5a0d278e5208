package lua

// The scripts that list who holds a lock (Holders), one per storage
// format; none of them writes.
var (
	Holders    = Load("holders.lua")
	RWHolders  = Load("rw_holders.lua")
	SemHolders = Load("sem_holders.lua")
)
