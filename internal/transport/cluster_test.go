package transport

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The engine on a Cluster: a node per master, its own slot map.

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

// nodeOf returns the engine's node for key's slot (nil: none yet).
func (t *Transport) nodeOf(key string) *node {
	if t.single != nil {
		return t.single
	}
	return t.slots.slots[keys.Slot(key)].Load()
}

// execCounts returns, for each master of cl, how many scripts it ran
// (EVAL and EVALSHA that ran, not those refused) since its statistics
// were reset.
func execCounts(t *testing.T, cl *redistest.Cluster) []int {
	out := make([]int, len(cl.Masters))
	for i, m := range cl.Masters {
		out[i] = int(commandCalls(t, m.Client(t), "eval", "evalsha") - commandFailed(t, m.Client(t), "eval", "evalsha"))
	}
	return out
}

// On a Cluster, calls whose replies are slow (held by a hook) hold up
// neither the calls sent after them to the same master nor their callers.
func TestClusterSlowRepliesHoldNobodyElse(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	hook := faultproxy.NewHook()
	cc := cl.Client(t)
	tr := newT(t, cc, Options{Hooks: []redis.Hook{hook}})
	bg := context.Background()
	name := nameOn(t, cc, cl.Masters[0], "trcl")
	require.NoError(t, tr.Do(bg, lockCall(name+":warm"), nil).Err())

	release := newRelease(t)
	late := make(chan Reply, 2)
	for i := range 2 {
		key := "{" + name + "}slow" + strconv.Itoa(i)
		slow := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Times: 1, Action: faultproxy.HoldReply(release.ch)})
		var r Reply
		release.whileHeld("the caller leaves when its context ends", func() {
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			r = tr.Do(ctx, lockCall(key), func(r Reply) { late <- r })
		})
		require.True(t, r.Gone)
		require.ErrorIs(t, r.Err(), context.DeadlineExceeded)
		require.Equal(t, 1, slow.Fired())
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release.whileHeld("a call after the slow ones goes out on its own", func() {
				assert.NoError(t, tr.Do(bg, lockCall("{"+name+"}fast"+strconv.Itoa(i)), nil).Err())
			})
		}()
	}
	wg.Wait()
	release.free()
	for range 2 {
		select {
		case r := <-late:
			locked(t, r)
		case <-time.After(5 * time.Second):
			t.Fatal("an abandoned call's reply never reached its give-back")
		}
	}
}

// A Cluster master that stops answering (paused) while calls whose
// callers left fill its connections' windows: a new call to it waits in
// the queue at most as long as its context and leaves unsent
// (ErrNotSent); calls to the other masters go on; once the master answers
// again, the abandoned calls' replies reach their give-backs.
func TestClusterStalledMasterHoldsNoOther(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	stalled, other := nameOn(t, cc, cl.Masters[0], "trclst"), nameOn(t, cc, cl.Masters[1], "trclok")
	require.NoError(t, tr.Do(bg, lockCall("{"+stalled+"}warm"), nil).Err())
	require.NoError(t, tr.Do(bg, lockCall("{"+other+"}warm"), nil).Err())
	// Both connections to the stalled master dialled before it stalls.
	var both sync.WaitGroup
	for i := range 8 {
		both.Add(1)
		go func() { defer both.Done(); _ = tr.Do(bg, lockCall("{"+stalled+"}warm"+strconv.Itoa(i)), nil) }()
	}
	both.Wait()
	partialCoverage(t, cl)
	cl.Masters[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Masters[0].Resume()
		}
	}()
	var gave sync.WaitGroup
	gone, unsent := 0, 0
	for i := 0; unsent < 64; i++ { // until its windows are full
		ctx, cancel := context.WithTimeout(bg, time.Millisecond)
		gave.Add(1)
		r := tr.Do(ctx, lockCall("{"+stalled+"}left"+strconv.Itoa(i)), func(Reply) { gave.Done() })
		cancel()
		if r.Gone {
			gone++
			unsent = 0
		} else {
			gave.Done()
			unsent++
			require.ErrorIs(t, r.Err(), ErrNotSent, "call %d", i)
		}
		require.Less(t, i, 8*nodeConns*window, "the windows never filled")
	}
	assert.GreaterOrEqual(t, gone, window, "a window filled")
	assert.LessOrEqual(t, tr.nodeOf(stalled).load(), nodeConns*window+nodeConns, "in flight on the stalled master: its windows")
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	r := tr.Do(ctx, lockCall("{"+stalled+"}new"), nil)
	took := time.Since(start)
	lag.Stop()
	assert.Less(t, took, 200*time.Millisecond+lag.Slack(), "it waited as long as its context (the machine's worst delay meanwhile: %v)", lag.Worst())
	require.ErrorIs(t, r.Err(), ErrNotSent)
	require.ErrorIs(t, r.Err(), context.DeadlineExceeded)

	octx, ocancel := context.WithTimeout(bg, 10*time.Second)
	defer ocancel()
	locked(t, tr.Do(octx, lockCall(other), nil))

	cl.Masters[0].Resume()
	resumed = true
	done := make(chan struct{})
	go func() { gave.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the abandoned calls' replies did not all reach their give-backs")
	}
	locked(t, tr.Do(bg, lockCall("{"+stalled+"}after"), nil))
}

// Calls abandoned on a paused master, then the transport drained (given
// up while the master is silent): every abandoned call's outcome (an
// error: its connection closed) reaches its give-back, and no goroutine
// of the engine is left; the other masters served the calls sent before
// the Drain.
func TestClusterAbandonedCallsEndAtDrain(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	partialCoverage(t, cl)
	cc := cl.Client(t)
	tr := New(cc, Options{})
	bg := context.Background()
	names := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		names[i] = nameOn(t, cc, m, "trcladv"+strconv.Itoa(i))
		require.NoError(t, tr.Do(bg, lockCall("{"+names[i]+"}warm"), nil).Err())
	}
	runtime.GC()
	g0 := runtime.NumGoroutine()
	const abandoned = 64
	cl.Masters[0].Pause()
	defer cl.Masters[0].Resume()
	var gave, gone atomic.Int32
	for i := range abandoned {
		// Long enough for the write on a loaded machine (a call whose
		// ctx ends before its write is not Gone: none was, once, at 1ms
		// in CI), short enough for 64 in sequence.
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		r := tr.Do(ctx, lockCall("{"+names[0]+"}left"+strconv.Itoa(i)), func(r Reply) {
			if errors.Is(r.Err(), ErrNoReply) {
				gave.Add(1)
			}
		})
		cancel()
		if r.Gone {
			gone.Add(1)
		}
	}
	require.Positive(t, gone.Load())
	for _, name := range names[1:] {
		locked(t, tr.Do(bg, lockCall("{"+name+"}beforeclose"), nil))
	}
	tr.Close()
	start := time.Now()
	tr.Drain(200 * time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second, "Drain gives up when told")
	waitFor(t, 5*time.Second, "every abandoned call's outcome reached its give-back", func() bool { return gave.Load() == gone.Load() })
	waitFor(t, 5*time.Second, "no worker left", func() bool { return tr.Workers() == 0 })
	var g1 int
	waitFor(t, 5*time.Second, "the goroutines back to where they were", func() bool {
		g1 = runtime.NumGoroutine()
		return g1 <= g0+4
	})
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
	}
}

// A Client's first call on a Cluster whose seed master is paused (the
// slot map not read yet): the caller leaves when its context ends, and its
// call is not sent.
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
// outcome is told once, to its caller or to its give-back, never both; a
// call reported not sent did not run; what Redis holds afterwards is
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
		told     atomic.Int32
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
	assert.Zero(t, tr.load(), "nothing left in flight")
}

// A Cluster's slot map is read at New, before any call: a call made later,
// while the node CLUSTER SLOTS would have gone to is paused, goes to its
// own master without waiting for that node.
func TestClusterSlotMapReadAtNew(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	require.Eventually(t, tr.slots.read.Load, 5*time.Second, 10*time.Millisecond, "read with no call made")
	for _, m := range cl.Masters {
		key := nameOn(t, cc, m, "trmapnew")
		n := tr.nodeOf(key)
		require.NotNil(t, n, key)
		assert.Equal(t, m.Addr(), n.addr, key)
	}
	other := nameOn(t, cc, cl.Masters[1], "trmapnew:other")
	for _, m := range []*redistest.Server{cl.Masters[0], cl.Masters[2]} {
		m.Pause()
		defer m.Resume()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	locked(t, tr.Do(ctx, lockCall(other), nil))
}
