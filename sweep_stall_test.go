package redisync

import (
	"context"
	"net"
	"regexp"
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
	"github.com/redisync-go/redisync/lua"
)

// The abandonment sweep's row for a stalled Redis (issue 33, break 1):
// Redis is paused (SIGSTOP) and stays silent on its open connections
// (ReadTimeout longer than the run); stallWorkers goroutines of one Client
// keep calling TryLock with stallCallCtx contexts, stallCalls calls in
// all, each abandoned by its caller. The engine has at most stallWindow
// calls written and unanswered on each of its stallConns connections to
// the primary (internal/transport's room): a call that waited for room
// there would ignore its context. Checked:
//
//   - every abandoned call returns within its context (plus stallSlack);
//   - then a Lock with a stallLockCtx context returns within it, with its
//     context's error, and an Unlock of a hold taken before the stall
//     returns within holds.ReleaseTimeout (plus slack);
//   - what the stall costs stays bounded: the goroutines and the heap
//     grown during it (measured, logged);
//   - no more calls were written to Redis's connections (counted on the
//     wire, through the redis client's Dialer, which the engine dials
//     with: no hook on the engine's path) than the bound on calls in
//     flight, plus the callers: a call whose caller left before it was
//     written is never written;
//   - once Redis runs again, a Lock works.
func TestSweepStalled(t *testing.T) { sweepStalled(t) }

const (
	stallCalls   = 20000
	stallWorkers = 64
	stallWindow  = 1024 // the engine's calls written and unanswered, a connection
	stallConns   = 2    // the engine's connections to a primary
	stallCallCtx = time.Millisecond
	stallLockCtx = 100 * time.Millisecond
	stallSlack   = time.Second
	stallLeft    = stallConns * stallWindow // the bound on calls in flight
)

// stallWrites counts, in what is written on the connections it dials, the
// lock script's calls on the stall's names ("stall-<n>").
type stallWrites struct {
	n   atomic.Int64
	pat *regexp.Regexp
}

func newStallWrites() *stallWrites {
	return &stallWrites{pat: regexp.MustCompile(`\$40\r\n` + lua.Lock.Hash() + `\r\n\$1\r\n1\r\n\$\d+\r\nstall-\d+\r\n`)}
}

func (s *stallWrites) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return stallConn{c, s}, nil
}

type stallConn struct {
	net.Conn
	s *stallWrites
}

func (c stallConn) Write(b []byte) (int, error) {
	c.s.n.Add(int64(len(c.s.pat.FindAllIndex(b, -1))))
	return c.Conn.Write(b)
}

func TestSweepStalledCountsWrites(t *testing.T) {
	// The counter counts what it should: a TryLock on a running Redis
	// is one write of it, a Lock of another name none.
	srv := redistest.Start(t)
	w := newStallWrites()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: w.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	bg := context.Background()
	hctx, err := c.Mutex("stall-7").TryLock(bg)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("stall-7").Unlock(hctx))
	hctx, err = c.Mutex("other").TryLock(bg)
	require.NoError(t, err)
	require.NoError(t, c.Mutex("other").Unlock(hctx))
	assert.EqualValues(t, 1, w.n.Load())
}

func sweepStalled(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	// What the stall's TryLocks write to Redis, counted on the wire.
	writes := newStallWrites()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute, Dialer: writes.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	held := c.Mutex("stall-held")
	hctx, err := held.Lock(bg)
	require.NoError(t, err)
	probe := c.Mutex("stall-probe")
	pctx, err := probe.Lock(bg) // the scripts are loaded: no NOSCRIPT later
	require.NoError(t, err)
	require.NoError(t, probe.Unlock(pctx))
	writes.n.Store(0)

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
	// Each call left in flight costs at most a goroutine: the sweep of a
	// TryLock whose outcome is unknown (a connection's reader is one
	// for all its calls).
	assert.Less(t, g1-g0, stallLeft+8*stallWorkers+200, "goroutines grew with the abandoned calls")
	assert.Less(t, grown, int64(64<<20), "memory (heap and stacks) grew with the abandoned calls")

	srv.Resume()
	<-floodDone
	time.Sleep(time.Second) // what was queued goes out
	sent := writes.n.Load()
	t.Logf("TryLocks written to Redis: %d of %d", sent, min(calls.Load(), stallCalls))
	assert.Positive(t, sent, "none written: the count counts nothing")
	assert.LessOrEqual(t, sent, int64(stallLeft+2*stallWorkers), "calls whose callers left before they were written were written")

	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	hctx2, err := c.Mutex("stall-after").Lock(ctx)
	require.NoError(t, err, "a Lock once Redis runs again")
	require.NoError(t, c.Mutex("stall-after").Unlock(hctx2))
}
