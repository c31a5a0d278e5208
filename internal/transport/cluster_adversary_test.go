package transport

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// A Cluster's full-duplex path under attack: abandoned calls on a paused
// master and a transport closed meanwhile, a script cache flushed on one
// master, calls redirected and abandoned, a client closed under calls in
// flight.

// partialCoverage has cl's masters serve their slots while one of them
// is paused however long that lasts (beyond the node timeout, Redis
// would answer CLUSTERDOWN for every slot).
func partialCoverage(t *testing.T, cl *redistest.Cluster) {
	for _, m := range cl.Masters {
		require.NoError(t, m.Client(t).ConfigSet(context.Background(), "cluster-require-full-coverage", "no").Err())
	}
}

// waitFor fails t unless cond holds within d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Calls abandoned on a paused master, then the transport closed (its
// Drain given up while the master is silent), then the master resumed:
// every abandoned call's reply reaches its give-back, the master's count
// of calls whose callers left goes back to 0, and no goroutine of the
// transport is left (none looping on a call whose reply never comes).
func TestClusterAbandonedCallsEndAfterClose(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	partialCoverage(t, cl)
	cc := cl.Client(t)
	tr := New(cc, Options{})
	bg := context.Background()
	names := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		names[i] = nameOn(t, cc, m, "trcladv"+strconv.Itoa(i))
		require.NoError(t, tr.Do(bg, lockCall(names[i]+":warm"), nil).Err())
	}
	k := lockCall(names[0])
	lf := tr.leftOf(&k)
	runtime.GC()
	g0 := runtime.NumGoroutine()

	const abandoned = 64
	cl.Masters[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Masters[0].Resume()
		}
	}()
	var gave atomic.Int32
	for i := range abandoned {
		ctx, cancel := context.WithTimeout(bg, time.Millisecond)
		r := tr.Do(ctx, lockCall("{"+names[0]+"}left"+strconv.Itoa(i)), func(r Reply) {
			if n, err := r.Int64(); err == nil && n == 1 {
				gave.Add(1)
			}
		})
		cancel()
		require.True(t, r.Gone, "call %d: on its way", i)
	}
	assert.EqualValues(t, abandoned, lf.n.Load(), "each abandoned call counted once")
	assert.EqualValues(t, abandoned, tr.Workers())

	tr.Close()
	start := time.Now()
	tr.Drain(200 * time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second, "Drain gives up when told")
	// The other masters serve the calls sent after Close.
	for _, name := range names[1:] {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		locked(t, tr.Do(ctx, lockCall("{"+name+"}afterclose"), nil))
		cancel()
	}

	cl.Masters[0].Resume()
	resumed = true
	waitFor(t, 10*time.Second, "every abandoned call's reply reached its give-back", func() bool { return gave.Load() == abandoned })
	waitFor(t, 5*time.Second, "the master's count of abandoned calls back to 0", func() bool { return lf.n.Load() == 0 })
	waitFor(t, 5*time.Second, "no worker left", func() bool { return tr.Workers() == 0 })
	var g1 int
	waitFor(t, 5*time.Second, "the goroutines back to where they were", func() bool {
		g1 = runtime.NumGoroutine()
		return g1 <= g0+8
	})
	t.Logf("goroutines: %d before the stall, %d after", g0, g1)
	assert.False(t, lf.full())
}

// execCounts returns, for each master of cl, how many script commands it
// ran (EVAL and EVALSHA, the failed ones, NOSCRIPT, not counted) since
// its statistics were reset.
func execCounts(t *testing.T, cl *redistest.Cluster) []int {
	out := make([]int, len(cl.Masters))
	for i, m := range cl.Masters {
		info, err := m.Client(t).Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			name, stats, ok := strings.Cut(line, ":")
			if !ok || name != "cmdstat_eval" && name != "cmdstat_evalsha" {
				continue
			}
			calls, failed := 0, 0
			for _, f := range strings.Split(stats, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.Atoi(v)
				switch k {
				case "calls":
					calls = n
				case "failed_calls":
					failed = n
				}
			}
			out[i] += calls - failed
		}
	}
	return out
}

// One master's script cache flushed (SCRIPT FLUSH there only), then calls
// to every master, sent alone and in batches: each succeeds, and each
// script ran once (a NOSCRIPT reply is sent again whole, nothing else is
// sent twice), on the flushed master and on the others.
func TestClusterScriptFlushOnOneMaster(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	names := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		names[i] = nameOn(t, cc, m, "trclflush"+strconv.Itoa(i))
		require.NoError(t, tr.Do(bg, lockCall(names[i]+":warm"), nil).Err())
		require.NoError(t, m.Client(t).ConfigResetStat(bg).Err())
	}
	require.NoError(t, cl.Masters[1].Client(t).ScriptFlush(bg).Err())

	const each = 20
	var wg sync.WaitGroup
	for i, name := range names {
		for j := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "{" + name + "}alone" + strconv.Itoa(j)
				locked(t, tr.Do(bg, lockCall(key), nil))
				// A re-entry: the count the call says it had, plus one.
				re := Call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "tr:owner", 1}, Takes: true}
				n, err := tr.Do(bg, re, nil).Int64()
				assert.NoError(t, err)
				assert.Equal(t, int64(2), n, "master %d", i)
			}()
		}
	}
	var batch []Call
	for _, name := range names {
		for j := range each {
			batch = append(batch, lockCall("{"+name+"}batch"+strconv.Itoa(j)))
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, r := range tr.DoAll(bg, batch) {
			locked(t, r)
		}
	}()
	wg.Wait()
	runs := execCounts(t, cl)
	for i := range cl.Masters {
		assert.Equal(t, 3*each, runs[i], "master %d: scripts run (flushed: %v)", i, i == 1)
		for j := range each {
			n, err := cl.Masters[i].Client(t).HGet(bg, "{"+names[i]+"}alone"+strconv.Itoa(j), "tr:owner").Int()
			require.NoError(t, err)
			require.Equal(t, 2, n, "master %d: the re-entry count", i)
		}
	}
}

// Calls first sent to one master whose slot has moved to another (the
// client's slot map is stale: MOVED, which go-redis follows through the
// cluster client), whose callers leave while the new master holds their
// replies back: each is counted once among the calls whose callers left,
// on the master it was first sent to, and uncounted once when its reply
// comes; the counts go back to 0, and each call ran once.
func TestClusterMovedAbandonedCountedOnce(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	hook := faultproxy.NewHook()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	target := rc.Masters[1].Addr()
	cc.OnNewNode(func(node *redis.Client) {
		if node.Options().Addr == target {
			node.AddHook(hook) // on the new master only
		}
	})
	tr := newT(t, cc, Options{})
	bg := context.Background()
	tag := nameOn(t, cc, rc.Masters[0], "trclmv")
	require.NoError(t, tr.Do(bg, lockCall("{"+tag+"}warm"), nil).Err())
	m1 := lockCall(nameOn(t, cc, rc.Masters[1], "trclmv1"))
	require.NoError(t, tr.Do(bg, m1, nil).Err())
	k := lockCall("{" + tag + "}x")
	from, to := tr.leftOf(&k), tr.leftOf(&m1)
	require.NotSame(t, from, to)

	rc.MigrateSlot(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	slow := hook.OnCommand(faultproxy.CommandRule{Action: faultproxy.DelayReply(300 * time.Millisecond), Args: func(args []any) bool {
		return len(args) > 3 && strings.HasPrefix(args[3].(string), "{"+tag+"}left")
	}})
	const abandoned = 40
	var gave atomic.Int32
	var wg sync.WaitGroup
	for i := range abandoned {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			r := tr.Do(ctx, lockCall("{"+tag+"}left"+strconv.Itoa(i)), func(r Reply) {
				if n, err := r.Int64(); err == nil && n == 1 {
					gave.Add(1)
				}
			})
			assert.True(t, r.Gone, "call %d: on its way", i)
		}()
	}
	wg.Wait()
	t.Logf("abandoned calls counted on the master first sent to: %d, on the new one: %d", from.n.Load(), to.n.Load())
	assert.Equal(t, abandoned, int(from.n.Load()+to.n.Load()), "each abandoned call counted once")
	waitFor(t, 10*time.Second, "every abandoned call's reply reached its give-back", func() bool { return gave.Load() == abandoned })
	waitFor(t, 5*time.Second, "the counts back to 0", func() bool { return from.n.Load() == 0 && to.n.Load() == 0 })
	assert.Equal(t, abandoned, slow.Fired(), "each ran on the new master, once")
	waitFor(t, 5*time.Second, "no worker left", func() bool { return tr.Workers() == 0 })
}

// A master that stays silent (paused, never resumed) under calls whose
// callers left: go-redis fails them when its reads time out, and the
// transport's count of them goes back to 0, each reply (an error) handed
// to its give-back, with nothing left running; the redis client's Close
// then returns.
func TestClusterSilentMasterAbandonedCallsEnd(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	partialCoverage(t, cl)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond})
	tr := newT(t, cc, Options{})
	bg := context.Background()
	name := nameOn(t, cc, cl.Masters[0], "trclcl")
	require.NoError(t, tr.Do(bg, lockCall(name+":warm"), nil).Err())
	k := lockCall(name)
	lf := tr.leftOf(&k)

	cl.Masters[0].Pause()
	defer cl.Masters[0].Resume()
	const abandoned = 32
	var late atomic.Int32
	for i := range abandoned {
		ctx, cancel := context.WithTimeout(bg, time.Millisecond)
		r := tr.Do(ctx, lockCall("{"+name+"}left"+strconv.Itoa(i)), func(r Reply) {
			if r.Err() != nil {
				late.Add(1)
			}
		})
		cancel()
		require.True(t, r.Gone)
	}
	require.EqualValues(t, abandoned, lf.n.Load())
	start := time.Now()
	waitFor(t, 15*time.Second, "the abandoned calls ended on a silent master", func() bool { return lf.n.Load() == 0 })
	t.Logf("the abandoned calls ended %v after they were left (read timeout 300ms)", time.Since(start))
	assert.EqualValues(t, abandoned, late.Load(), "each reply, an error, went to its give-back")
	waitFor(t, 5*time.Second, "no worker left", func() bool { return tr.Workers() == 0 })
	closed := make(chan error, 1)
	go func() { closed <- cc.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's Close did not return")
	}
}

// A Client's first call on a Cluster whose seed master is paused (the
// slot map not read yet): the caller leaves when its context ends,
// however long go-redis would wait to read the map, and its call is not
// sent.
func TestClusterFirstCallOnStalledSeed(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	partialCoverage(t, cl)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr()}, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	tr := newT(t, cc, Options{})
	bg := context.Background()
	cl.Masters[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Masters[0].Resume()
		}
	}()
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := tr.Do(ctx, lockCall("trclseed"), nil)
	took := time.Since(start)
	t.Logf("the first call returned after %v: %v", took, r.Err())
	assert.Less(t, took, time.Second, "the caller waited beyond its context")
	assert.ErrorIs(t, r.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, r.Err(), ErrNotSent)
	assert.False(t, r.Gone)

	cl.Masters[0].Resume()
	resumed = true
	ctx, cancel = context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	locked(t, tr.Do(ctx, lockCall("trclseed"), nil))
}

// Callers that leave as their replies arrive (contexts of tens of
// microseconds to a few milliseconds, on every master): each call's
// outcome is told once, to its caller or to its give-back, never both;
// a call reported not sent did not run; what Redis holds afterwards is
// exactly what the callers and give-backs were told was taken.
func TestClusterLeavingRacesReply(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	tags := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		tags[i] = "{" + nameOn(t, cc, m, "trclrace") + "}"
		require.NoError(t, tr.Do(bg, lockCall(tags[i]+"warm"), nil).Err())
	}
	const workers, each = 24, 100
	type outcome struct {
		told     atomic.Int32 // how many times an outcome was told
		took     atomic.Bool
		notSent  atomic.Bool
		lateSeen atomic.Bool
	}
	outs := make([]*outcome, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				i := w*each + j
				o := &outcome{}
				outs[i] = o
				key := tags[i%len(tags)] + strconv.Itoa(i)
				d := time.Duration(20+(i*37)%2000) * time.Microsecond
				ctx, cancel := context.WithTimeout(bg, d)
				r := tr.Do(ctx, lockCall(key), func(r Reply) {
					o.lateSeen.Store(true)
					o.told.Add(1)
					if n, err := r.Int64(); err == nil && n == 1 {
						o.took.Store(true)
					}
				})
				cancel()
				switch {
				case r.Gone:
				case r.Err() != nil:
					o.told.Add(1)
					o.notSent.Store(errors.Is(r.Err(), ErrNotSent))
				default:
					o.told.Add(1)
					if n, err := r.Int64(); err == nil && n == 1 {
						o.took.Store(true)
					}
				}
			}
		}()
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "every call told once", func() bool {
		for _, o := range outs {
			if o.told.Load() != 1 {
				return false
			}
		}
		return true
	})
	waitFor(t, 5*time.Second, "no worker left", func() bool { return tr.Workers() == 0 })
	gone, notSent := 0, 0
	for i, o := range outs {
		key := tags[i%len(tags)] + strconv.Itoa(i)
		n, err := cc.Exists(bg, key).Result()
		require.NoError(t, err)
		assert.Equal(t, o.took.Load(), n == 1, "call %d: taken as told", i)
		if o.notSent.Load() {
			notSent++
			assert.False(t, o.lateSeen.Load(), "call %d: not sent, and its give-back called", i)
		}
		if o.lateSeen.Load() {
			gone++
		}
	}
	t.Logf("%d calls: %d left on their way (give-back told), %d not sent", len(outs), gone, notSent)
	for i := range cl.Masters {
		k := lockCall(tags[i] + "x")
		assert.Zero(t, tr.leftOf(&k).n.Load())
	}
}
