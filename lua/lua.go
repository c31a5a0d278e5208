// Package lua embeds the Lua scripts that change redisync's keys in Redis.
//
// Every state change of a lock is one script, so it is atomic in Redis. Scripts
// run with EVALSHA and fall back to EVAL when Redis has not cached them yet.
//
// # Keys and channels on a Cluster
//
// A script declares as KEYS the keys it reads or writes, all in one slot,
// and nothing else: the channels it publishes on (in the same slot, named
// after the lock) are ARGV. While a slot is being migrated, Redis (7.0)
// checks a script's declared keys before running it: a master that lacks
// every one of them answers ASK (the keys are on the importing master), one
// that lacks some of several answers TRYAGAIN, and the importing master,
// after ASKING, answers TRYAGAIN for several keys some of which it lacks.
// A channel declared as a key never exists, so every script naming one was
// refused with TRYAGAIN for the whole migration; PUBLISH and SPUBLISH from
// a script are not refused, on the master that serves the slot or, after
// ASKING, on the one importing it. A key a script touches without having
// declared it fails inside the script ("a non local key") on a master that
// lacks it, after what the script wrote before: every key is declared.
//
// So does a declared key the script has emptied itself (DEL, or HDEL or
// ZREM of its last member), on the master the slot is migrating away from:
// a script reads what it needs before it changes a key, and never touches
// a key again once it may have emptied it. Where a script cannot avoid it
// (expired entries dropped before the script writes to the same set), it
// refuses itself first, with TRYAGAIN and before writing anything, on that
// master only (migrating.lua): the transport sends it again.
//
// # FIPS 140-only mode
//
// EVALSHA names a script by the SHA-1 digest of its source, which this
// package normally computes when it loads the script. A program run with
// GODEBUG=fips140=only (crypto/fips140.Enforced reports true) may not use
// SHA-1: Go panics. In that mode no digest is ever computed in the process,
// not even at package initialisation: a script learns its digest from Redis
// (SCRIPT LOAD, which hashes on the server), lazily, the first time Run needs
// it, and until then it is sent whole, with EVAL. Everything else is as in the
// normal mode; see Script.Run, Script.Pipe and Learn.
package lua

import (
	"context"
	"crypto/fips140"
	"embed"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Script is an embedded Lua script.
//
// Its Hash (the SHA-1 digest EVALSHA names it by) is known from the start,
// except in FIPS 140-only mode, where it is "" until learned from Redis (see
// the package documentation); it never changes once known.
type Script struct {
	*redis.Script
	name      string
	src       string
	serverSHA bool // FIPS 140-only mode: the digest comes from Redis
}

// Load returns the embedded script name (e.g. "lock.lua"). It panics when the
// file is missing, which is a build-time mistake caught by every test.
func Load(name string) *Script {
	return newScript(name, read(name), fips140.Enforced())
}

// LoadWith returns the embedded script name with the embedded preludes (the
// helpers a family of scripts shares) before it, in order.
func LoadWith(name string, preludes ...string) *Script {
	src := ""
	for _, p := range preludes {
		src += read(p) + "\n"
	}
	return newScript(name, src+read(name), fips140.Enforced())
}

// newScript returns the script name with source src. With serverSHA (FIPS
// 140-only mode: crypto/sha1 would panic) its digest is not computed here
// but learned from Redis.
func newScript(name, src string, serverSHA bool) *Script {
	s := &Script{name: name, src: src, serverSHA: serverSHA}
	if !serverSHA {
		s.Script = redis.NewScript(src)
		return s
	}
	s.Script = redis.NewScriptServerSHA(src)
	learning.mu.Lock()
	learning.scripts = append(learning.scripts, s)
	learning.mu.Unlock()
	return s
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

// Run runs the script on c: EVALSHA, then EVAL if Redis answers NOSCRIPT.
//
// In FIPS 140-only mode, while the script does not know its digest, Run
// first learns it (and every other script's) from Redis, on the node that
// serves keys[0] (see Learn), then sends EVALSHA; if it cannot learn it
// (Redis refused or could not be reached, or another goroutine is learning
// right now) it sends EVAL. After a failed attempt, Run does not try to
// learn again for a second. Nothing is hashed in the process.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	if !s.serverSHA {
		return s.Script.Run(ctx, c, keys, args...)
	}
	sha := s.Hash()
	if sha == "" {
		sha = s.learn(ctx, c, keys)
	}
	if sha == "" {
		return s.Script.Eval(ctx, c, keys, args...)
	}
	r := c.EvalSha(ctx, sha, keys, args...)
	if IsNoScript(r.Err()) {
		return s.Script.Eval(ctx, c, keys, args...)
	}
	return r
}

// EvalSha sends the script by its digest (EVALSHA) when the digest is known,
// and whole (EVAL) otherwise, which happens only in FIPS 140-only mode
// before the digest was learned. It sends nothing else: unlike
// redis.Script.EvalSha in that mode, it never sends SCRIPT LOAD, so c may be
// a pipeline.
func (s *Script) EvalSha(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	if sha := s.Hash(); sha != "" || !s.serverSHA {
		return c.EvalSha(ctx, sha, keys, args...)
	}
	return c.Eval(ctx, s.src, keys, args...)
}

// Pipe queues the script on p as EVALSHA or, in FIPS 140-only mode while its
// digest is not known yet, as EVAL (see EvalSha). Callers retry the commands
// that answered NOSCRIPT with PipeEval.
func (s *Script) Pipe(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.EvalSha(ctx, p, keys, args...)
}

// PipeEval queues the script on p as EVAL, sending its whole source.
func (s *Script) PipeEval(ctx context.Context, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.Eval(ctx, p, keys, args...)
}

// learning is what FIPS 140-only mode needs to learn digests from Redis:
// the scripts that learn theirs, one attempt at a time (callers that find
// one under way send their script whole rather than wait for it), and no new
// attempt for learnBackoff after one failed.
var learning struct {
	mu      sync.Mutex // guards scripts
	scripts []*Script
	attempt sync.Mutex   // held (TryLock) by the attempt under way
	after   atomic.Int64 // UnixNano before which no attempt starts
}

const learnBackoff = time.Second

// learn learns s's digest, for Run on c with keys, and returns it ("" when
// it could not: the caller sends EVAL).
func (s *Script) learn(ctx context.Context, c redis.Scripter, keys []string) string {
	if _, ok := c.(redis.Pipeliner); ok {
		return "" // a SCRIPT LOAD queued now would answer too late
	}
	if cc, ok := c.(*redis.ClusterClient); ok && len(keys) > 0 {
		// Load it where it is about to run: the master of keys[0]'s slot.
		if node, err := cc.MasterForKey(ctx, keys[0]); err == nil {
			c = node
		}
	}
	if node, ok := c.(*redis.Client); ok {
		Learn(ctx, node)
		return s.Hash()
	}
	// Another kind of client (a Ring, a Conn, a ClusterClient without a
	// node for the key): this script alone, with the client's SCRIPT LOAD.
	if !begin() {
		return ""
	}
	defer learning.attempt.Unlock()
	if sha := s.Hash(); sha != "" {
		return sha
	}
	if sha, err := s.Script.Load(ctx, c).Result(); err != nil || !isDigest(sha) {
		failed(ctx)
		return ""
	}
	return s.Hash()
}

// Learn makes every script of the package (and every other script made by
// Load or LoadWith) know its digest, in FIPS 140-only mode: it sends SCRIPT
// LOAD for each one that does not know it yet, in one pipeline on node (a
// single Redis server: a *redis.Client of a single node or Sentinel, or one
// node of a Cluster, which is then also where they are cached). It reports
// whether every script knows its digest; outside FIPS 140-only mode they
// all do from the start, and Learn sends nothing.
//
// node must not be nil. Learn never waits for another attempt: while one is under way, or for a
// second after one failed, it returns at once (false if digests are still
// missing). Run calls it when it needs a digest; callers that only pipeline
// scripts (Pipe) may call it to stop sending whole scripts.
func Learn(ctx context.Context, node *redis.Client) bool {
	if !begin() {
		return len(unknown()) == 0
	}
	defer learning.attempt.Unlock()
	todo := unknown()
	if len(todo) == 0 {
		return true
	}
	cmds := make([]*redis.StringCmd, len(todo))
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range todo {
			cmds[i] = p.ScriptLoad(ctx, s.src)
		}
		return nil
	})
	all := true
	for i, s := range todo {
		if sha, err := cmds[i].Result(); err == nil && isDigest(sha) {
			_ = s.Script.Load(ctx, digest(sha)) // stores it in s.Script
		} else {
			all = false
		}
	}
	if !all {
		failed(ctx)
	}
	return all
}

// begin starts a learning attempt, if none is under way and none failed
// within learnBackoff; the caller then unlocks learning.attempt.
func begin() bool {
	if time.Now().UnixNano() < learning.after.Load() {
		return false
	}
	return learning.attempt.TryLock()
}

// failed holds off the next attempt for learnBackoff, unless the attempt
// failed because ctx, its caller's, ended.
func failed(ctx context.Context) {
	if ctx.Err() == nil {
		learning.after.Store(time.Now().Add(learnBackoff).UnixNano())
	}
}

// unknown returns the scripts that do not know their digest yet.
func unknown() []*Script {
	learning.mu.Lock()
	defer learning.mu.Unlock()
	var todo []*Script
	for _, s := range learning.scripts {
		if s.Hash() == "" {
			todo = append(todo, s)
		}
	}
	return todo
}

// isDigest reports whether sha looks like what SCRIPT LOAD answers: a SHA-1
// digest in 40 lower-case hex digits.
func isDigest(sha string) bool {
	if len(sha) != 40 {
		return false
	}
	for _, r := range sha {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// digest is a redis.Scripter that answers SCRIPT LOAD with a digest already
// learned (from a pipelined SCRIPT LOAD), so that redis.Script.Load stores
// it in the script: redis.Script has no other way to be told its digest.
// It answers nothing else.
type digest string

func (d digest) ScriptLoad(context.Context, string) *redis.StringCmd {
	return redis.NewStringResult(string(d), nil)
}

func (digest) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return unsupported(ctx)
}

func (digest) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return unsupported(ctx)
}

func (digest) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return unsupported(ctx)
}

func (digest) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return unsupported(ctx)
}

func (digest) ScriptExists(context.Context, ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(nil, errDigestOnly)
}

func unsupported(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errDigestOnly)
	return cmd
}

var errDigestOnly = errors.New("redisync/lua: a learned digest runs nothing")

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
