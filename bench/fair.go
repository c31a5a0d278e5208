package main

import "github.com/redisync-go/redisync"

// FairMutex rows: a lock granted in arrival order.
func fairOf(c *redisync.Client, name string) rsMutex { return c.FairMutex(name) }

func fairLibs() []lib {
	return []lib{{name: "redisync FairMutex", fair: true, new: newRedisync(fairOf, nil)}}
}
