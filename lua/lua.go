// Package lua embeds the Lua scripts that change redisync's keys in Redis.
//
// Every state change of a lock is one script, so it is atomic in Redis. Scripts
// run with EVALSHA and fall back to EVAL when Redis has not cached them yet.
package lua

import (
	"context"
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Script is an embedded Lua script.
type Script struct {
	*redis.Script
	name string
}

// Load returns the embedded script name (e.g. "lock.lua"). It panics when the
// file is missing, which is a build-time mistake caught by every test.
func Load(name string) *Script {
	return &Script{Script: redis.NewScript(read(name)), name: name}
}

// LoadWith returns the embedded script name with the embedded preludes (the
// helpers a family of scripts shares) before it, in order.
func LoadWith(name string, preludes ...string) *Script {
	src := ""
	for _, p := range preludes {
		src += read(p) + "\n"
	}
	return &Script{Script: redis.NewScript(src + read(name)), name: name}
}

func read(name string) string {
	src, err := files.ReadFile(name)
	if err != nil {
		panic("redisync/lua: " + err.Error())
	}
	return string(src)
}

// Name is the file the script came from.
func (s *Script) Name() string { return s.name }

// IsNoScript reports whether err is Redis's NOSCRIPT reply, which a pipelined
// EVALSHA returns after Redis lost its script cache (restart, SCRIPT FLUSH).
func IsNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Pipe queues the script on p as EVALSHA. Callers retry the commands that
// answered NOSCRIPT with PipeEval.
func (s *Script) Pipe(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.EvalSha(ctx, p, keys, args...)
}

// PipeEval queues the script on p as EVAL, sending its whole source.
func (s *Script) PipeEval(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.Eval(ctx, p, keys, args...)
}

// The scripts of the reentrant Mutex (Redisson's RLock wire format). Those
// that give fencing tokens have fence.lua before them.
var (
	Lock        = LoadWith("lock.lua", "fence.lua")
	Unlock      = Load("unlock.lua")
	Renew       = Load("renew.lua")
	ForceUnlock = Load("forceunlock.lua")
	Drop        = Load("drop.lua")
	Handoff     = LoadWith("handoff.lua", "fence.lua")
)
