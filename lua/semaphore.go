package lua

// The scripts of the Semaphore. Each is sem_prelude.lua (the helpers they
// share) and sem_type.lua (the type check) followed by its own file.
var (
	SemAcquire   = loadSem("sem_acquire.lua")
	SemRelease   = loadSem("sem_release.lua")
	SemRenew     = loadSem("sem_renew.lua")
	SemDrop      = loadSem("sem_drop.lua")
	SemSet       = loadSem("sem_set.lua")
	SemAvailable = loadSem("sem_available.lua")
)

func loadSem(name string) *Script {
	return LoadWith(name, "migrating.lua", "sem_prelude.lua", "sem_type.lua")
}
