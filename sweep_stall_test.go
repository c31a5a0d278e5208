package redisync

import (
	"context"
	"fmt"
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
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The abandonment sweep's row for a stalled Redis (issue 33, break 1):
// Redis is paused (SIGSTOP) and stays silent on its open connections
// (ReadTimeout longer than the run); stallWorkers goroutines of one Client
// keep calling TryLock with stallCallCtx contexts, stallCalls calls in
// all, each abandoned by its caller. go-redis's full-duplex queue is made
// small (a window of stallWindow) so that the run reaches its bound with
// tens of thousands of calls rather than hundreds of thousands: a call
// that waited for room there would ignore its context. Checked:
//
//   - every abandoned call returns within its context (plus stallSlack);
//   - then a Lock with a stallLockCtx context returns within it, with its
//     context's error, and an Unlock of a hold taken before the stall
//     returns within holds.ReleaseTimeout (plus slack);
//   - what the stall costs stays bounded: the goroutines and the heap
//     grown during it (measured, logged);
//   - no more calls were handed to go-redis than the bound on calls in
//     flight whose callers left, plus the callers: a call whose caller
//     left before it was sent is never sent;
//   - once Redis runs again, a Lock works.
func TestSweepStalled(t *testing.T) {
	t.Run("full-duplex", func(t *testing.T) { sweepStalled(t, false) })
	t.Run("lanes", func(t *testing.T) { sweepStalled(t, true) })
}

const (
	stallCalls   = 20000
	stallWorkers = 64
	stallWindow  = 1024
	stallCallCtx = time.Millisecond
	stallLockCtx = 100 * time.Millisecond
	stallSlack   = time.Second
	stallLeft    = 1024 // the transport's bound on calls whose callers left
)

// sweepStalled is TestSweepStalled on the full-duplex path, or on the
// lanes (pipelines), where a call whose caller left before its pipeline
// went out is not sent either.
func sweepStalled(t *testing.T, lanes bool) {
	srv := redistest.Start(t)
	bg := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { _ = rdb.Close() })
	// What the stall's TryLocks hand to go-redis (a hook counts them
	// there: on the full-duplex path once queued to be written, on the
	// lanes as their pipeline goes out).
	hook := faultproxy.NewHook()
	if lanes {
		gate(rdb, hook)
	} else {
		rdb.AddHook(hook)
	}
	// The redis client's full-duplex auto-pipeliner, made first with a
	// small window: the transport's is this one (go-redis keeps one).
	_, err := rdb.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true, FullDuplexWindow: stallWindow})
	require.NoError(t, err)
	c := newClient(t, rdb)
	held := c.Mutex("stall-held")
	hctx, err := held.Lock(bg)
	require.NoError(t, err)
	probe := c.Mutex("stall-probe")
	pctx, err := probe.Lock(bg) // the scripts are loaded: no NOSCRIPT later
	require.NoError(t, err)
	require.NoError(t, probe.Unlock(pctx))
	tries := hook.OnCommand(faultproxy.CommandRule{Name: "evalsha", Action: faultproxy.DelayBefore(0),
		Args: func(args []any) bool {
			return len(args) > 3 && args[1] == lua.Lock.Hash() && strings.HasPrefix(fmt.Sprint(args[3]), "stall-")
		}})

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()

	srv.Pause()
	t.Cleanup(srv.Resume)
	var calls, late atomic.Int64
	var worst atomic.Int64
	var flood sync.WaitGroup
	for w := range stallWorkers {
		flood.Add(1)
		go func() {
			defer flood.Done()
			m := c.Mutex("stall-" + strconv.Itoa(w))
			for calls.Add(1) <= stallCalls {
				ctx, cancel := context.WithTimeout(bg, stallCallCtx)
				start := time.Now()
				_, err := m.TryLock(ctx)
				d := time.Since(start)
				cancel()
				if err == nil {
					t.Error("TryLock took a lock on a paused Redis")
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
	// A flood whose calls stop returning is stuck: waiting, whatever
	// their contexts say.
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
			t.Errorf("the abandoned calls stopped returning after %d calls (their contexts: %v)", last, stallCallCtx)
		}
		break
	}
	assert.Zero(t, late.Load(), "abandoned calls returned later than their context (the worst after %v)", time.Duration(worst.Load()))

	lockErr := make(chan error, 1)
	lockTook := make(chan time.Duration, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, stallLockCtx)
		defer cancel()
		start := time.Now()
		_, err := c.Mutex("stall-lock").Lock(ctx)
		lockTook <- time.Since(start)
		lockErr <- err
	}()
	select {
	case d := <-lockTook:
		err := <-lockErr
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, d, stallLockCtx+stallSlack, "a Lock with a %v context after the stall's calls", stallLockCtx)
		t.Logf("Lock (%v context) returned after %v: %v", stallLockCtx, d, err)
	case <-time.After(stallLockCtx + 5*time.Second):
		t.Errorf("a Lock with a %v context has not returned after 5s", stallLockCtx)
	}

	unlockDone := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		err := held.Unlock(hctx)
		t.Logf("Unlock: %v", err)
		unlockDone <- time.Since(start)
	}()
	select {
	case d := <-unlockDone:
		assert.Less(t, d, holds.ReleaseTimeout+stallSlack, "an Unlock after the stall's calls")
		t.Logf("Unlock returned after %v", d)
	case <-time.After(holds.ReleaseTimeout + 5*time.Second):
		t.Errorf("an Unlock has not returned after %v", holds.ReleaseTimeout+5*time.Second)
	}

	var m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	grown := int64(m1.HeapInuse+m1.StackInuse) - int64(m0.HeapInuse+m0.StackInuse)
	t.Logf("%d calls abandoned on a paused Redis: %d goroutines more, heap in use %+.1f MiB, stacks %+.1f MiB",
		min(calls.Load(), stallCalls), g1-g0, float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/(1<<20),
		float64(int64(m1.StackInuse)-int64(m0.StackInuse))/(1<<20))
	// Each call left in flight costs a goroutine (its reply's) and at
	// most two more: the sweep of a TryLock whose outcome is unknown, and
	// go-redis's host of the hook's run.
	assert.Less(t, g1-g0, 3*stallLeft+8*stallWorkers+200, "goroutines grew with the abandoned calls")
	assert.Less(t, grown, int64(64<<20), "memory (heap and stacks) grew with the abandoned calls")

	srv.Resume()
	<-floodDone
	time.Sleep(time.Second) // what was queued goes out
	sent := tries.Fired()
	t.Logf("TryLocks handed to go-redis: %d of %d", sent, min(calls.Load(), stallCalls))
	assert.LessOrEqual(t, sent, stallLeft+2*stallWorkers, "calls whose callers left before they were sent were sent")

	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	hctx2, err := c.Mutex("stall-after").Lock(ctx)
	require.NoError(t, err, "a Lock once Redis runs again")
	require.NoError(t, c.Mutex("stall-after").Unlock(hctx2))
}
