package fipstest

import (
	"context"
	"crypto/fips140"
	"crypto/sha1"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// What the parent tells the child it runs under GODEBUG=fips140=only.
const (
	envNode    = "REDISYNC_FIPS_NODE"    // a redis-server's address
	envCluster = "REDISYNC_FIPS_CLUSTER" // a Cluster's masters, comma-separated
	envLockSHA = "REDISYNC_FIPS_LOCK_SHA"
	ranMarker  = "fips140=only enforced, SHA-1 refused"
)

// TestFIPS140Only runs redisync in a process started with
// GODEBUG=fips140=only, where Go panics on SHA-1 (crypto/sha1): this test
// binary again, once against a single redis-server and once against a
// three-master Cluster, each a fresh process in which no script knows its
// digest yet. Before redisync learnt its digests from Redis, the child
// panicked before its first test, in package lua's initialisation.
//
// Run under GODEBUG=fips140=only itself (go test with that setting), it
// runs the single-node case in its own process against a server of its own.
func TestFIPS140Only(t *testing.T) {
	if fips140.Enforced() {
		child(t)
		return
	}
	t.Run("node", func(t *testing.T) {
		srv := redistest.Start(t)
		reexec(t, envNode+"="+srv.Addr())
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		reexec(t, envCluster+"="+strings.Join(cl.Addrs(), ","))
	})
}

// reexec runs TestFIPS140Only in this test binary under
// GODEBUG=fips140=only (race detector and all, when built with -race) with
// env, and fails t unless it passed there.
func reexec(t *testing.T, env string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFIPS140Only$", "-test.count=1", "-test.v", "-test.timeout=2m")
	godebug := "fips140=only"
	if prev := os.Getenv("GODEBUG"); prev != "" {
		godebug = prev + "," + godebug
	}
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug, env, envLockSHA+"="+lua.Lock.Hash())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under GODEBUG=%s: %v\n%s", godebug, err, out)
	}
	if !strings.Contains(string(out), ranMarker) || !strings.Contains(string(out), "--- PASS: TestFIPS140Only") {
		t.Fatalf("under GODEBUG=%s the test did not run as it should:\n%s", godebug, out)
	}
	t.Logf("under GODEBUG=%s:\n%s", godebug, out)
}

// child is TestFIPS140Only in the FIPS 140-only process.
func child(t *testing.T) {
	require.Panics(t, func() { sha1.Sum(nil) }, "SHA-1 allowed: not in FIPS 140-only mode")
	t.Log(ranMarker)
	require.Empty(t, lua.Lock.Hash(), "a digest was computed in the process")

	var rdb redis.UniversalClient
	var hook *faultproxy.Hook
	switch {
	case os.Getenv(envCluster) != "":
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(os.Getenv(envCluster), ",")})
		t.Cleanup(func() { _ = cc.Close() })
		rdb = cc
	default: // a node, or a server of our own when run under fips140=only directly
		addr := os.Getenv(envNode)
		if addr == "" {
			addr = redistest.Start(t).Addr()
		}
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		hook = faultproxy.NewHook() // on redisync's own calls: WithHooks (exercise)
		rdb = c
	}
	exercise(t, rdb, hook)
}

// exercise runs every primitive once on rdb, a Mutex's renewals, and a
// Mutex taken and renewed after Redis lost its scripts (SCRIPT FLUSH). With
// hook (a single node) it also checks that faultproxy.RunsScript matches the
// scripts in this mode.
func exercise(t *testing.T, rdb redis.UniversalClient, hook *faultproxy.Hook) {
	ctx := context.Background()
	var renewals, failures atomic.Int64
	obs := &redisync.Observer{Renewed: func(e redisync.RenewalEvent) {
		renewals.Add(int64(e.Holds - e.Lost - e.Failed))
		failures.Add(int64(e.Lost + e.Failed))
	}}
	opts := []redisync.Option{redisync.WithWatchdogTimeout(3 * time.Second), redisync.WithObserver(obs)}
	if hook != nil {
		opts = append(opts, redisync.WithHooks(hook))
	}
	c, err := redisync.New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	other, err := redisync.New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	renewed := func(n int64) {
		t.Helper()
		require.Eventually(t, func() bool { return renewals.Load() >= n }, 10*time.Second, 10*time.Millisecond,
			"renewals: %d, want %d", renewals.Load(), n)
		require.Zero(t, failures.Load(), "failed renewals")
	}
	var renewSha, renewEval *faultproxy.Rule
	if hook != nil {
		renewSha = hook.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Renew.Script)})
		renewEval = hook.OnCommand(faultproxy.CommandRule{Name: "eval", Args: faultproxy.RunsScript(lua.Renew.Script)})
	}

	// A Mutex: the first script sent whole has every digest learned from
	// Redis, in the background, the same digests as go-redis computes in
	// the normal mode.
	m := c.Mutex("fips:mutex")
	lctx, err := m.Lock(ctx)
	require.NoError(t, err)
	// Learn stores the digests one script after another, so the test
	// waits for each (checking the others right after lock.lua's failed
	// once in CI, under -race).
	for _, s := range []*lua.Script{lua.Lock, lua.Renew, lua.SemRelease} {
		require.Eventually(t, func() bool { return s.Hash() != "" }, 5*time.Second, time.Millisecond,
			"a digest learned with lock.lua")
	}
	if want := os.Getenv(envLockSHA); want != "" {
		require.Equal(t, want, lua.Lock.Hash(), "Redis's digest of lock.lua")
	}
	again, err := m.Lock(lctx)
	require.NoError(t, err)
	n, err := m.HoldCount(again)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	renewed(2) // renewals are pipelined EVALSHAs
	if hook != nil {
		require.Positive(t, renewSha.Fired(), "RunsScript matches EVALSHA")
		require.Zero(t, renewEval.Fired())
	}

	// A waiter of another client is woken by the unlock (pub/sub), well
	// before the lease (3s, renewed every second) would free the lock.
	woken := make(chan error, 1)
	go func() {
		wctx, err := other.Mutex("fips:mutex").Lock(ctx)
		if err == nil {
			err = other.Mutex("fips:mutex").Unlock(wctx)
		}
		woken <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, m.Unlock(again))
	start := time.Now()
	require.NoError(t, m.Unlock(lctx))
	select {
	case err := <-woken:
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 1500*time.Millisecond, "woken by the unlock message, not by the lease")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken")
	}

	// Redis loses its scripts: a held lease is still renewed, a new lock
	// still taken (NOSCRIPT, then the source is sent).
	held, err := c.Mutex("fips:flushed").Lock(ctx)
	require.NoError(t, err)
	noscript := errorCount(t, rdb, "NOSCRIPT")
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	before := renewals.Load()
	renewed(before + 1)
	require.NoError(t, held.Err())
	if hook != nil {
		require.Positive(t, renewEval.Fired(), "RunsScript matches EVAL")
	}
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	fresh, err := c.Mutex("fips:fresh").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("fips:fresh").Unlock(fresh))
	require.NoError(t, c.Mutex("fips:flushed").Unlock(held))
	require.Greater(t, errorCount(t, rdb, "NOSCRIPT"), noscript, "Redis answered NOSCRIPT")

	// Every other primitive once.
	fenced := c.Mutex("fips:fenced", redisync.WithFencing())
	fctx, err := fenced.Lock(ctx)
	require.NoError(t, err)
	token, ok := fenced.Token(fctx)
	require.True(t, ok)
	require.Positive(t, token)
	forced, err := fenced.ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, forced)

	fair := c.FairMutex("fips:fair")
	fctx, err = fair.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, fair.Unlock(fctx))

	rw := c.RWMutex("fips:rw")
	rctx, err := rw.RLock(ctx)
	require.NoError(t, err)
	require.NoError(t, rw.RUnlock(rctx))
	wctx, err := rw.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, rw.Unlock(wctx))

	sem := c.Semaphore("fips:sem")
	require.NoError(t, sem.SetPermits(ctx, 2))
	sctx, err := sem.Acquire(ctx, 2)
	require.NoError(t, err)
	avail, err := sem.Available(ctx)
	require.NoError(t, err)
	require.Zero(t, avail)
	require.NoError(t, sem.Release(sctx, 2))

	latch := c.CountDownLatch("fips:latch")
	set, err := latch.TrySetCount(ctx, 2)
	require.NoError(t, err)
	require.True(t, set)
	for range 2 {
		require.NoError(t, latch.CountDown(ctx))
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, latch.Wait(wait))

	require.Positive(t, commandCalls(t, rdb, "script|load"), "digests learned with SCRIPT LOAD")
}

// errorCount sums Redis's count of the error replies with prefix over the
// masters rdb uses (INFO errorstats).
func errorCount(t *testing.T, rdb redis.UniversalClient, prefix string) int {
	return infoSum(t, rdb, "errorstats", `errorstat_`+regexp.QuoteMeta(prefix)+`:count=(\d+)`)
}

// commandCalls sums Redis's count of calls of cmd over the masters rdb
// uses (INFO commandstats).
func commandCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int {
	return infoSum(t, rdb, "commandstats", `cmdstat_`+regexp.QuoteMeta(cmd)+`:calls=(\d+)`)
}

func infoSum(t *testing.T, rdb redis.UniversalClient, section, pattern string) int {
	t.Helper()
	re := regexp.MustCompile(pattern)
	var sum atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, section).Result()
		if m := re.FindStringSubmatch(info); err == nil && m != nil {
			n, _ := strconv.Atoi(m[1])
			sum.Add(int64(n))
		}
		return err
	}
	ctx := context.Background()
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, r)
	default:
		t.Fatalf("unexpected client %T", rdb)
	}
	require.NoError(t, err)
	return int(sum.Load())
}
