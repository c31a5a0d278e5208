package redisync

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/redistest"
)

// The stall row of issue 34 on a Cluster: one master paused (SIGSTOP,
// silent on its open connections: a read timeout longer than the run),
// clusterStallCalls TryLocks of one Client on its keys abandoned
// (stallCallCtx contexts, stallWorkers goroutines), go-redis's
// full-duplex window made small as in TestSweepStalled. Checked: every
// abandoned call returns within its context (plus stallSlack); then a
// Lock with a stallLockCtx context returns within it on the paused master
// (its context's error) and takes its lock on another master; an Unlock
// returns within holds.ReleaseTimeout on the paused master, at once on
// another; what the stall costs is bounded (goroutines and heap grown,
// logged); once the master runs again, a Lock on it works, and Close
// leaves no goroutine of the library behind.
func TestClusterStalled(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	bg := context.Background()
	for _, m := range cl.Masters {
		// The other masters serve their slots however long the pause.
		require.NoError(t, m.Client(t).ConfigSet(bg, "cluster-require-full-coverage", "no").Err())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = cc.Close() })
	_, err := cc.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true, FullDuplexWindow: stallWindow})
	require.NoError(t, err)
	lib0 := redisyncGoroutines()
	c, err := New(cc)
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close()
		}
	})
	paused, other := cl.Masters[0], cl.Masters[1]
	on := func(s *redistest.Server, prefix string) *Mutex { return c.Mutex(nameOn(t, cc, s, prefix)) }
	heldP, heldO := on(paused, "cstall-held"), on(other, "cstall-held")
	hctxP, err := heldP.Lock(bg)
	require.NoError(t, err)
	hctxO, err := heldO.Lock(bg)
	require.NoError(t, err)
	for _, m := range cl.Masters { // the scripts loaded: no NOSCRIPT later
		probe := on(m, "cstall-probe")
		pctx, err := probe.Lock(bg)
		require.NoError(t, err)
		require.NoError(t, probe.Unlock(pctx))
	}
	flooded := make([]*Mutex, stallWorkers)
	for w := range flooded {
		flooded[w] = on(paused, "cstall-"+strconv.Itoa(w))
	}

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	paused.Pause()
	resumed := false
	defer func() {
		if !resumed {
			paused.Resume()
		}
	}()
	start := time.Now()
	var calls, late atomic.Int64
	var worst atomic.Int64
	var flood sync.WaitGroup
	for w := range stallWorkers {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for calls.Add(1) <= clusterStallCalls {
				ctx, cancel := context.WithTimeout(bg, stallCallCtx)
				s := time.Now()
				_, err := flooded[w].TryLock(ctx)
				d := time.Since(s)
				cancel()
				if err == nil {
					t.Error("TryLock took a lock on a paused master")
				}
				if d > stallCallCtx+stallSlack {
					late.Add(1)
				}
				for cur := worst.Load(); int64(d) > cur && !worst.CompareAndSwap(cur, int64(d)); cur = worst.Load() {
				}
			}
		}()
	}
	floodDone := make(chan struct{})
	go func() { flood.Wait(); close(floodDone) }()
	for stuck, last := time.Now(), int64(-1); ; {
		select {
		case <-floodDone:
		case <-time.After(100 * time.Millisecond):
			if n := calls.Load(); n != last {
				stuck, last = time.Now(), n
				continue
			} else if time.Since(stuck) < 5*time.Second {
				continue
			}
			t.Fatalf("the abandoned calls stopped returning after %d calls (their contexts: %v)", last, stallCallCtx)
		}
		break
	}
	t.Logf("%d TryLocks abandoned in %v, the worst returned after %v", clusterStallCalls, time.Since(start), time.Duration(worst.Load()))
	assert.Zero(t, late.Load(), "abandoned calls returned later than their context")

	// A Lock with a short context, on the paused master and on another.
	lockIn := func(m *Mutex) (context.Context, error, time.Duration) {
		ctx, cancel := context.WithTimeout(bg, stallLockCtx)
		defer cancel()
		s := time.Now()
		hctx, err := m.Lock(ctx)
		return hctx, err, time.Since(s)
	}
	_, err, d := lockIn(on(paused, "cstall-lock"))
	t.Logf("Lock on the paused master (%v context) returned after %v: %v", stallLockCtx, d, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, d, stallLockCtx+stallSlack, "a Lock on the paused master after the stall's calls")
	lo := on(other, "cstall-lock")
	lctx, err, d := lockIn(lo)
	t.Logf("Lock on another master (%v context) returned after %v: %v", stallLockCtx, d, err)
	require.NoError(t, err, "a Lock on another master after the stall's calls")
	assert.Less(t, d, stallLockCtx+stallSlack)
	require.NoError(t, lo.Unlock(lctx))

	s := time.Now()
	err = heldO.Unlock(hctxO)
	d = time.Since(s)
	t.Logf("Unlock on another master returned after %v: %v", d, err)
	assert.NoError(t, err)
	assert.Less(t, d, stallSlack)
	s = time.Now()
	err = heldP.Unlock(hctxP)
	d = time.Since(s)
	t.Logf("Unlock on the paused master returned after %v: %v", d, err)
	assert.Error(t, err, "a release on a paused master")
	assert.Less(t, d, holds.ReleaseTimeout+stallSlack, "an Unlock on the paused master after the stall's calls")

	var m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	grown := int64(m1.HeapInuse+m1.StackInuse) - int64(m0.HeapInuse+m0.StackInuse)
	t.Logf("%d calls abandoned on a paused master of a Cluster: %d goroutines more, heap in use %+.1f MiB, stacks %+.1f MiB",
		clusterStallCalls, g1-g0, float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/(1<<20),
		float64(int64(m1.StackInuse)-int64(m0.StackInuse))/(1<<20))
	assert.Less(t, g1-g0, 3*stallLeft+8*stallWorkers+200, "goroutines grew with the abandoned calls")
	assert.Less(t, grown, int64(64<<20), "memory (heap and stacks) grew with the abandoned calls")

	paused.Resume()
	resumed = true
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	after := on(paused, "cstall-after")
	actx, err := after.Lock(ctx)
	require.NoError(t, err, "a Lock once the master runs again")
	require.NoError(t, after.Unlock(actx))
	closed = true
	require.NoError(t, c.Close())
	eventually(t, 10*time.Second, "no goroutine of the library left after Close", func() bool { return redisyncGoroutines() <= lib0 })
}

// clusterStallCalls is how many calls TestClusterStalled abandons.
const clusterStallCalls = 100000

// TryLocks abandoned on a paused master, then Client.Close while the
// master is still silent, then the master resumed: Close returns once the
// abandoned calls' replies come (within holds.ReleaseTimeout in any
// case), the locks those calls took are given back, and no goroutine of
// the library is left.
func TestClusterCloseUnderAbandonedCalls(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	bg := context.Background()
	for _, m := range cl.Masters {
		require.NoError(t, m.Client(t).ConfigSet(bg, "cluster-require-full-coverage", "no").Err())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = cc.Close() })
	lib0 := redisyncGoroutines()
	c, err := New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	paused := cl.Masters[0]
	tag := "{" + nameOn(t, cc, paused, "cclose") + "}"
	warm := c.Mutex(tag + "warm")
	wctx, err := warm.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(wctx))

	paused.Pause()
	resumed := false
	defer func() {
		if !resumed {
			paused.Resume()
		}
	}()
	const abandoned = 64
	for i := range abandoned {
		// Long enough to be written on a loaded machine (at 1ms none was,
		// once in CI: nothing was abandoned).
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err := c.Mutex(tag + strconv.Itoa(i)).TryLock(ctx)
		cancel()
		require.Error(t, err)
	}
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		_ = c.Close()
		closed <- time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	early := false
	select {
	case d := <-closed:
		early = true
		t.Logf("Close returned after %v, the master still paused", d)
	default:
	}
	paused.Resume()
	resumed = true
	if !early {
		select {
		case d := <-closed:
			t.Logf("Close returned after %v (the master resumed after 300ms)", d)
			assert.Less(t, d, holds.ReleaseTimeout+stallSlack)
		case <-time.After(holds.ReleaseTimeout + 5*time.Second):
			t.Fatal("Close did not return")
		}
	}
	src := paused.Client(t)
	eventually(t, 5*time.Second, "the locks the abandoned TryLocks took given back", func() bool {
		n, err := src.ClusterCountKeysInSlot(bg, int(src.ClusterKeySlot(bg, tag).Val())).Result()
		return err == nil && n == 0
	})
	eventually(t, 10*time.Second, "no goroutine of the library left after Close", func() bool {
		return redisyncGoroutines() <= lib0
	})
}

// A Client's first Lock on a Cluster whose only seed master is paused
// (the slot map not read yet) returns when its context ends, not when
// go-redis's reads of the map time out; once the master runs again, a
// Lock works.
func TestClusterFirstLockOnStalledSeed(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	bg := context.Background()
	for _, m := range cl.Masters {
		require.NoError(t, m.Client(t).ConfigSet(bg, "cluster-require-full-coverage", "no").Err())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Masters[0].Addr()}, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	cl.Masters[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Masters[0].Resume()
		}
	}()
	start := time.Now()
	c, err := New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	t.Logf("New returned after %v", time.Since(start))
	ctx, cancel := context.WithTimeout(bg, stallLockCtx)
	defer cancel()
	start = time.Now()
	_, err = c.Mutex("cseed").Lock(ctx)
	took := time.Since(start)
	t.Logf("the first Lock (%v context) returned after %v: %v", stallLockCtx, took, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, stallLockCtx+stallSlack)
	// A MultiLock's calls go in a batch.
	mctx, mcancel := context.WithTimeout(bg, stallLockCtx)
	defer mcancel()
	start = time.Now()
	_, err = c.MultiLock([]string{"cseed-a", "cseed-b"}).Lock(mctx)
	took = time.Since(start)
	t.Logf("a first MultiLock (%v context) returned after %v: %v", stallLockCtx, took, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, stallLockCtx+stallSlack)

	cl.Masters[0].Resume()
	resumed = true
	ctx, cancel = context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	hctx, err := c.Mutex("cseed").Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("cseed").Unlock(hctx))
}
