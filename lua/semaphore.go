package lua

import "github.com/redis/go-redis/v9"

// The scripts of the Semaphore. Each is sem_prelude.lua (the helpers they
// share) followed by its own file.
var (
	SemAcquire   = loadSem("sem_acquire.lua")
	SemRelease   = loadSem("sem_release.lua")
	SemRenew     = loadSem("sem_renew.lua")
	SemDrop      = loadSem("sem_drop.lua")
	SemSet       = loadSem("sem_set.lua")
	SemAvailable = loadSem("sem_available.lua")
)

// loadSem returns the embedded semaphore script name with sem_prelude.lua
// before it. It panics when a file is missing, as Load does.
func loadSem(name string) *Script {
	prelude, err := files.ReadFile("sem_prelude.lua")
	if err != nil {
		panic("redisync/lua: " + err.Error())
	}
	src, err := files.ReadFile(name)
	if err != nil {
		panic("redisync/lua: " + err.Error())
	}
	return &Script{Script: redis.NewScript(string(prelude) + "\n" + string(src)), name: name}
}
