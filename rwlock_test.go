package redisync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// zcard returns the size of the zset at key.
func zcard(t testing.TB, rdb redis.Cmdable, key string) int {
	t.Helper()
	n, err := rdb.ZCard(context.Background(), key).Result()
	require.NoError(t, err)
	return int(n)
}

// waitWriters waits until n writers are registered as waiting on r.
func waitWriters(t testing.TB, rdb redis.Cmdable, r *RWMutex, n int) {
	t.Helper()
	eventually(t, 3*time.Second, fmt.Sprintf("%d waiting writers", n), func() bool {
		return zcard(t, rdb, r.keys[2]) == n
	})
}

// waitReaders waits until n readers are registered as waiting on r.
func waitReaders(t testing.TB, rdb redis.Cmdable, r *RWMutex, n int) {
	t.Helper()
	eventually(t, 3*time.Second, fmt.Sprintf("%d waiting readers", n), func() bool {
		return zcard(t, rdb, r.keys[3]) == n
	})
}

func rwState(t testing.TB, r *RWMutex) (locked, write bool, readers int) {
	t.Helper()
	ctx := context.Background()
	locked, err := r.IsLocked(ctx)
	require.NoError(t, err)
	readers, write, err = rwHeld(ctx, r)
	require.NoError(t, err)
	return locked, write, readers
}

func TestRWMutexReadersShareWritersExclude(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:basic"
		r := e.client(t).RWMutex(name)
		other := e.client(t).RWMutex(name)

		r1, err := r.RLock(context.Background())
		require.NoError(t, err)
		r2, err := other.TryRLock(context.Background())
		require.NoError(t, err)
		locked, write, readers := rwState(t, r)
		assert.True(t, locked)
		assert.False(t, write)
		assert.Equal(t, 2, readers)
		_, err = other.TryLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, other.Unlock(r2), ErrNotHeld, "a reader does not hold the write lock")

		require.NoError(t, r.RUnlock(r1))
		assert.ErrorIs(t, context.Cause(r1), context.Canceled)
		_, _, readers = rwState(t, r)
		assert.Equal(t, 1, readers)
		require.NoError(t, other.RUnlock(r2))
		assert.ErrorIs(t, other.RUnlock(r2), ErrNotHeld)
		assert.Empty(t, e.keys(t))

		w, err := r.Lock(context.Background())
		require.NoError(t, err)
		locked, write, readers = rwState(t, other)
		assert.True(t, locked)
		assert.True(t, write)
		assert.Zero(t, readers)
		_, err = other.TryRLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired)
		_, err = other.TryLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.ErrorIs(t, other.RUnlock(WithOwner(context.Background())), ErrNotHeld)

		cctx, cancel := context.WithCancel(w)
		cancel()
		require.NoError(t, r.Unlock(cctx), "Unlock works with a cancelled context")
		assert.ErrorIs(t, context.Cause(w), context.Canceled)
		assert.Empty(t, e.keys(t))
		locked, _, _ = rwState(t, r)
		assert.False(t, locked)
	})
}

func TestRWMutexReentrantBothWays(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		r := e.client(t).RWMutex("rw:reenter")
		type key struct{}
		w, err := r.Lock(context.Background())
		require.NoError(t, err)
		inner := context.WithValue(w, key{}, 1)
		got, err := r.Lock(inner)
		require.NoError(t, err)
		assert.Equal(t, inner, got, "a re-entry returns the context it was given")
		n, err := r.HoldCount(w)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, r.Unlock(got))
		require.NoError(t, w.Err())
		require.NoError(t, r.Unlock(w))
		assert.ErrorIs(t, r.Unlock(w), ErrNotHeld)

		rd, err := r.RLock(context.Background())
		require.NoError(t, err)
		inner = context.WithValue(rd, key{}, 2)
		got, err = r.RLock(inner)
		require.NoError(t, err)
		assert.Equal(t, inner, got)
		n, err = r.RHoldCount(rd)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, r.RUnlock(got))
		require.NoError(t, rd.Err())
		require.NoError(t, r.RUnlock(rd))
		assert.ErrorIs(t, context.Cause(rd), context.Canceled)
		assert.Empty(t, e.keys(t))
	})
}

// A writer may take the read lock; after its Unlock it still holds it, with
// a context that outlived the write hold's.
func TestRWMutexDowngrade(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:downgrade"
		r := e.client(t).RWMutex(name)
		other := e.client(t).RWMutex(name)
		type key struct{}
		parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "kept"))
		defer cancelParent()
		w, err := r.Lock(parent)
		require.NoError(t, err)
		rd, err := r.RLock(w)
		require.NoError(t, err)
		assert.NotEqual(t, w, rd, "a first read hold gets its own context")
		assert.Equal(t, "kept", rd.Value(key{}))
		_, err = other.TryRLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired, "still write-locked")

		require.NoError(t, r.Unlock(w))
		assert.ErrorIs(t, context.Cause(w), context.Canceled)
		require.NoError(t, rd.Err(), "the read hold outlives the write hold")
		locked, write, readers := rwState(t, r)
		assert.True(t, locked)
		assert.False(t, write)
		assert.Equal(t, 1, readers)
		n, _ := r.RHoldCount(rd)
		assert.Equal(t, 1, n)

		o, err := other.TryRLock(context.Background())
		require.NoError(t, err, "now readers share it")
		_, err = other.TryLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, other.RUnlock(o))

		// The read hold still ends with the context the write lock was taken with.
		cancelParent()
		eventually(t, time.Second, "read hold context cancelled with its parent", func() bool { return rd.Err() != nil })
		require.NoError(t, r.RUnlock(rd))
		assert.Empty(t, e.keys(t))
	})
}

// A reader may not upgrade: TryLock says ErrNotAcquired, Lock waits until
// its context ends, and leaves nothing behind.
func TestRWMutexNoUpgrade(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		r := e.client(t).RWMutex("rw:upgrade")
		rd, err := r.RLock(context.Background())
		require.NoError(t, err)
		_, err = r.TryLock(rd)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), "cannot upgrade")

		// Lock refuses at once rather than waiting for its own read hold.
		ctx, cancel := context.WithTimeout(rd, 5*time.Second)
		defer cancel()
		lag := watchLag(t)
		start := time.Now()
		got, err := r.Lock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), "cannot upgrade")
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		assert.Nil(t, got)
		// Also through a context derived from the read hold's.
		type key struct{}
		_, err = r.Lock(context.WithValue(rd, key{}, 1))
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, []string{"rw:upgrade", "{rw:upgrade}:rw-readers:rw:upgrade"}, e.keys(t), "no waiting writer left behind")

		again, err := r.RLock(rd)
		require.NoError(t, err, "the reader may still re-enter")
		require.NoError(t, r.RUnlock(again))
		require.NoError(t, r.RUnlock(rd))
		assert.Empty(t, e.keys(t))
	})
}

// Once a writer waits, new readers wait behind it; a reader that already
// holds the read lock may re-enter. A read unlock that frees the lock wakes
// the writer, and the write unlock wakes the readers.
func TestRWMutexWaitingWriterBlocksNewReaders(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:writer-pref"
		rdb := e.rdb(t)
		r := e.client(t).RWMutex(name)
		rd, err := r.RLock(context.Background())
		require.NoError(t, err)

		wm := e.client(t).RWMutex(name)
		w := lockAsync(context.Background(), wm.Lock)
		waitWriters(t, rdb, r, 1)

		newReader := e.client(t).RWMutex(name)
		_, err = newReader.TryRLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired, "a new reader waits behind the writer")
		nr := lockAsync(context.Background(), newReader.RLock)
		waitReaders(t, rdb, r, 1)

		again, err := r.TryRLock(rd)
		require.NoError(t, err, "a reader that holds it may re-enter")
		require.NoError(t, r.RUnlock(again))
		noLock(t, w, 50*time.Millisecond, "writer while a reader holds")

		// The bounds add what the machine's scheduling delay was meanwhile
		// (a poll would come after seconds; a loaded machine delays a wake-up
		// by as much as it keeps the test's goroutines off a CPU).
		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, r.RUnlock(rd))
		rw := recvLock(t, w, 5*time.Second, "writer")
		require.NoError(t, rw.err)
		assert.Less(t, rw.at.Sub(start), 500*time.Millisecond+lag.Slack(),
			"woken by the read unlock, not by polling (the machine's worst delay meanwhile: %v)", lag.Worst())
		noLock(t, nr, 50*time.Millisecond, "new reader while the writer holds")

		start = time.Now()
		require.NoError(t, wm.Unlock(rw.ctx))
		rr := recvLock(t, nr, 5*time.Second, "new reader")
		require.NoError(t, rr.err)
		assert.Less(t, rr.at.Sub(start), 500*time.Millisecond+lag.Slack(),
			"woken by the write unlock (the machine's worst delay meanwhile: %v)", lag.Worst())
		require.NoError(t, newReader.RUnlock(rr.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// Readers that waited for a write hold go before the next writer, so a
// stream of writers cannot starve them either.
func TestRWMutexWaitingReadersGoBeforeNextWriter(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:alternate"
		rdb := e.rdb(t)
		w1 := e.client(t).RWMutex(name)
		wctx, err := w1.Lock(context.Background())
		require.NoError(t, err)

		rm := e.client(t).RWMutex(name)
		rr := lockAsync(context.Background(), rm.RLock)
		waitReaders(t, rdb, w1, 1)
		w2 := e.client(t).RWMutex(name)
		ww := lockAsync(context.Background(), w2.Lock)
		waitWriters(t, rdb, w1, 1)

		require.NoError(t, w1.Unlock(wctx))
		got := recvLock(t, rr, time.Second, "waiting reader")
		require.NoError(t, got.err)
		noLock(t, ww, 100*time.Millisecond, "next writer while the admitted reader reads")
		require.NoError(t, rm.RUnlock(got.ctx))
		gw := recvLock(t, ww, time.Second, "next writer")
		require.NoError(t, gw.err)
		require.NoError(t, w2.Unlock(gw.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// The write unlock wakes every local waiting reader at once.
func TestRWMutexWriteUnlockWakesAllReaders(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:wake-all"
		rdb := e.rdb(t)
		w := e.client(t).RWMutex(name)
		wctx, err := w.Lock(context.Background())
		require.NoError(t, err)
		r := e.client(t).RWMutex(name)
		const n = 6
		var waits []<-chan lockResult
		for range n {
			waits = append(waits, lockAsync(context.Background(), r.RLock))
		}
		waitReaders(t, rdb, w, n)
		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, w.Unlock(wctx))
		for _, ch := range waits {
			got := recvLock(t, ch, 5*time.Second, "reader")
			require.NoError(t, got.err)
			assert.Less(t, got.at.Sub(start), 500*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
			defer func() { assert.NoError(t, r.RUnlock(got.ctx)) }()
		}
		_, _, readers := rwState(t, r)
		assert.Equal(t, n, readers)
	})
}

// A waiting writer whose context ends stops holding readers back at once.
func TestRWMutexCancelledWriterReleasesReaders(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:cancel-writer"
		rdb := e.rdb(t)
		opt := WithWaiterTimeout(time.Minute)
		r := e.client(t).RWMutex(name, opt)
		rd, err := r.RLock(context.Background())
		require.NoError(t, err)
		wctx, cancelW := context.WithCancel(context.Background())
		w := lockAsync(wctx, e.client(t).RWMutex(name, opt).Lock)
		waitWriters(t, rdb, r, 1)
		nm := e.client(t).RWMutex(name, opt)
		nr := lockAsync(context.Background(), nm.RLock)
		waitReaders(t, rdb, r, 1)

		lag := watchLag(t)
		start := time.Now()
		cancelW()
		gw := recvLock(t, w, 5*time.Second, "cancelled writer")
		assert.ErrorIs(t, gw.err, context.Canceled)
		got := recvLock(t, nr, 5*time.Second, "reader")
		require.NoError(t, got.err)
		// Held back, the reader would wait the writer's 1-minute timeout.
		assert.Less(t, got.at.Sub(start), 500*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		require.NoError(t, nm.RUnlock(got.ctx))
		require.NoError(t, r.RUnlock(rd))
		assert.Empty(t, e.keys(t))
	})
}

// A waiting writer that crashes holds new readers back for at most the
// waiter timeout.
func TestRWMutexCrashedWaitingWriterSkippedWithinBound(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "rw:crashed-writer"
		const bound = 600 * time.Millisecond
		rdb := e.rdb(t)
		opt := WithWaiterTimeout(bound)
		r := e.client(t).RWMutex(name, opt)
		rd, err := r.RLock(context.Background())
		require.NoError(t, err)
		crashed, crash := crashableRDB(t, e.addr)
		w := lockAsync(context.Background(), newClient(t, crashed).RWMutex(name, opt).Lock)
		waitWriters(t, rdb, r, 1)
		lag := watchLag(t)
		crash()
		crashedAt := time.Now()

		nm := e.client(t).RWMutex(name, opt)
		got, err := nm.RLock(context.Background())
		require.NoError(t, err)
		waited := time.Since(crashedAt)
		t.Logf("crashed waiting writer stopped holding readers back after %v (bound %v)", waited, bound)
		assert.Less(t, waited, bound+300*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		assert.Error(t, recvLock(t, w, 3*time.Second, "crashed writer").err)
		require.NoError(t, nm.RUnlock(got))
		require.NoError(t, r.RUnlock(rd))
		assert.Empty(t, e.keys(t))
	})
}

// A crashed reader's hold expires within one watchdog timeout while the
// live readers keep theirs; then a waiting writer gets the lock once the
// live readers are done.
func TestRWMutexCrashedReaderExpiresOthersKeepTheirs(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		if e.mr != nil {
			realTimeTTL(t, e.mr) // leases run out in real time
		}
		const name = "rw:crashed-reader"
		const lease = 600 * time.Millisecond
		rdb := e.rdb(t)
		crashed, crash := crashableRDB(t, e.addr)
		cr, err := newClient(t, crashed, WithWatchdogTimeout(lease)).RWMutex(name).RLock(context.Background())
		require.NoError(t, err)
		live := e.client(t, WithWatchdogTimeout(lease)).RWMutex(name)
		lr, err := live.RLock(context.Background())
		require.NoError(t, err)
		_, _, readers := rwState(t, live)
		require.Equal(t, 2, readers)

		lag := watchLag(t)
		crash()
		crashedAt := time.Now()
		eventually(t, 5*time.Second, "the crashed reader's hold to expire", func() bool {
			_, _, readers := rwState(t, live)
			return readers == 1
		})
		waited := time.Since(crashedAt)
		t.Logf("crashed reader's hold expired after %v (lease %v)", waited, lease)
		assert.Less(t, waited, lease+300*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		<-cr.Done()
		assert.ErrorIs(t, context.Cause(cr), ErrLeaseLost)

		wm := e.client(t, WithWatchdogTimeout(lease)).RWMutex(name)
		w := lockAsync(context.Background(), wm.Lock)
		waitWriters(t, rdb, live, 1)
		time.Sleep(2 * lease) // the live reader's lease is renewed meanwhile
		require.NoError(t, lr.Err(), "the live reader keeps its hold")
		select {
		case got := <-w:
			t.Fatalf("writer got the lock (err %v) while a live reader holds it", got.err)
		default:
		}
		_, _, readers = rwState(t, live)
		assert.Equal(t, 1, readers)

		require.NoError(t, live.RUnlock(lr))
		gw := recvLock(t, w, time.Second, "writer")
		require.NoError(t, gw.err)
		require.NoError(t, wm.Unlock(gw.ctx))
		assert.Empty(t, e.keys(t))
	})
}

func TestRWMutexBadInput(t *testing.T) {
	c := newClient(t, miniEnv(t).rdb(t))
	for _, tc := range []struct {
		name string
		opts []RWOption
	}{
		{"", nil},
		{"a}b", nil},
		{"ok", []RWOption{nil}},
		{"ok", []RWOption{WithWaiterTimeout(0)}},
		{"ok", []RWOption{WithLease(-time.Second)}},
	} {
		r := c.RWMutex(tc.name, tc.opts...)
		ctx := context.Background()
		_, err := r.Lock(ctx)
		assert.ErrorIs(t, err, ErrInvalid, "name %q", tc.name)
		_, err = r.RLock(ctx)
		assert.ErrorIs(t, err, ErrInvalid)
		_, err = r.TryLock(ctx)
		assert.ErrorIs(t, err, ErrInvalid)
		_, err = r.TryRLock(ctx)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorIs(t, r.Unlock(ctx), ErrInvalid)
		assert.ErrorIs(t, r.RUnlock(ctx), ErrInvalid)
		_, err = r.IsLocked(ctx)
		assert.ErrorIs(t, err, ErrInvalid)
		_, err = r.ForceUnlock(ctx)
		assert.ErrorIs(t, err, ErrInvalid)
	}
	var nilClient *Client
	_, err := nilClient.RWMutex("x").RLock(context.Background())
	assert.ErrorIs(t, err, ErrInvalid)
	r := c.RWMutex("{orders}:42")
	for _, k := range r.keys {
		assert.True(t, strings.HasPrefix(k, "{orders}"), k)
	}
}

// Every key of a read-write lock shares one Cluster slot, and waiters are
// woken across the cluster.
func TestRWMutexOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	rdb := cl.Client(t)
	a := newClient(t, cl.Client(t))
	b := newClient(t, cl.Client(t))
	for _, name := range []string{"rw-cl", "{app}:rw-cl"} {
		ra, rb := a.RWMutex(name), b.RWMutex(name)
		rd, err := ra.RLock(context.Background())
		require.NoError(t, err)
		w := lockAsync(context.Background(), rb.Lock)
		waitWriters(t, rdb, ra, 1)
		_, err = ra.TryRLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired, "behind the waiting writer")
		rr := lockAsync(context.Background(), ra.RLock)
		waitReaders(t, rdb, ra, 1)
		require.NoError(t, ra.RUnlock(rd))
		gw := recvLock(t, w, 3*time.Second, "writer")
		require.NoError(t, gw.err)
		noLock(t, rr, 50*time.Millisecond, "reader while write-locked")
		require.NoError(t, rb.Unlock(gw.ctx))
		gr := recvLock(t, rr, 3*time.Second, "reader")
		require.NoError(t, gr.err)
		require.NoError(t, ra.RUnlock(gr.ctx))
		locked, err := ra.IsLocked(context.Background())
		require.NoError(t, err)
		assert.False(t, locked)
	}
}

// Releasing one read hold costs the same with many readers as with one.
func BenchmarkRWMutexRUnlockAmongReaders(b *testing.B) {
	for _, others := range []int{0, 10000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			e := &testEnv{srv: redistest.Start(b)}
			e.addr = e.srv.Addr()
			c := newClient(b, e.rdb(b))
			r := c.RWMutex("rw:bench")
			for range others {
				_, err := r.RLock(context.Background())
				require.NoError(b, err)
			}
			b.ResetTimer()
			for range b.N {
				ctx, err := r.RLock(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if err := r.RUnlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
