package redisync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/lua"
)

// fairQueue returns the fields queued for f, head first.
func fairQueue(t testing.TB, rdb redis.Cmdable, f *FairMutex) []string {
	t.Helper()
	q, err := rdb.ZRange(context.Background(), f.queue, 0, -1).Result()
	require.NoError(t, err)
	return q
}

// waitQueued waits until f's queue holds n waiters.
func waitQueued(t testing.TB, rdb redis.Cmdable, f *FairMutex, n int) {
	t.Helper()
	eventually(t, 3*time.Second, fmt.Sprintf("%d queued waiters", n), func() bool {
		return len(fairQueue(t, rdb, f)) == n
	})
}

// lockResult is what a background Lock call reports.
type lockResult struct {
	ctx context.Context
	err error
	at  time.Time
}

func lockAsync(ctx context.Context, lock func(context.Context) (context.Context, error)) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		hctx, err := lock(ctx)
		ch <- lockResult{hctx, err, time.Now()}
	}()
	return ch
}

// recvLock receives ch's result, failing the test if none comes within d,
// plus the scheduling delay the machine showed meanwhile (see recvWithin).
func recvLock(t testing.TB, ch <-chan lockResult, d time.Duration, what string) lockResult {
	t.Helper()
	lag := startLag()
	defer lag.Stop()
	start := time.Now()
	r, ok := recvWithin(lag, start, d, ch)
	if !ok {
		t.Fatalf("%s: no result within %v (the machine's worst delay meanwhile: %v)", what, time.Since(start), lag.Worst())
	}
	return r
}

func noLock(t testing.TB, ch <-chan lockResult, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: returned (err %v) but should still wait", what, r.err)
	case <-time.After(d):
	}
}

func TestFairMutexLockUnlockLeavesNothing(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		f := e.client(t).FairMutex("fair:basic")
		ctx, err := f.Lock(context.Background())
		require.NoError(t, err)
		locked, err := f.IsLocked(ctx)
		require.NoError(t, err)
		assert.True(t, locked)
		ttl, err := f.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 25*time.Second)
		assert.Equal(t, []string{"fair:basic"}, e.keys(t), "no queue keys while nobody waits")

		type key struct{}
		inner := context.WithValue(ctx, key{}, 1)
		got, err := f.Lock(inner)
		require.NoError(t, err)
		assert.Equal(t, inner, got, "a re-entry returns the context it was given")
		n, err := f.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, f.Unlock(got))
		assert.NoError(t, ctx.Err(), "one hold remains")
		require.NoError(t, f.Unlock(ctx))
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
		assert.ErrorIs(t, f.Unlock(ctx), ErrNotHeld)

		assert.Empty(t, e.keys(t))
		locked, err = f.IsLocked(context.Background())
		require.NoError(t, err)
		assert.False(t, locked)
		ttl, err = f.TTL(context.Background())
		require.NoError(t, err)
		assert.Zero(t, ttl)
		n, err = f.HoldCount(context.Background())
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestFairMutexTryLockAndForeignUnlock(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		f := e.client(t).FairMutex("fair:try")
		g := e.client(t).FairMutex("fair:try")
		ctx, err := f.TryLock(context.Background())
		require.NoError(t, err)
		_, err = g.TryLock(context.Background())
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, []string{"fair:try"}, e.keys(t), "TryLock never queues")

		other := WithOwner(context.Background())
		assert.ErrorIs(t, g.Unlock(other), ErrNotHeld)
		assert.ErrorIs(t, g.Unlock(context.Background()), ErrNotHeld)
		n, _ := f.HoldCount(ctx)
		assert.Equal(t, 1, n, "a foreign Unlock changes nothing")

		// A context cancelled while holding: Unlock still works.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		require.NoError(t, f.Unlock(cctx))
		assert.Empty(t, e.keys(t))
	})
}

func TestFairMutexBadInput(t *testing.T) {
	c := newClient(t, miniEnv(t).rdb(t))
	for _, tc := range []struct {
		name string
		opts []FairOption
	}{
		{"", nil},
		{"a}b", nil},
		{"a{}b", nil},
		{"ok", []FairOption{nil}},
		{"ok", []FairOption{WithWaiterTimeout(0)}},
		{"ok", []FairOption{WithWaiterTimeout(-time.Second)}},
		{"ok", []FairOption{WithWaiterTimeout(time.Millisecond)}},
		{"ok", []FairOption{WithLease(0)}},
	} {
		f := c.FairMutex(tc.name, tc.opts...)
		_, err := f.Lock(context.Background())
		assert.ErrorIs(t, err, ErrInvalid, "name %q", tc.name)
		_, err = f.TryLock(context.Background())
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorIs(t, f.Unlock(context.Background()), ErrInvalid)
		_, err = f.IsLocked(context.Background())
		assert.ErrorIs(t, err, ErrInvalid)
		_, err = f.ForceUnlock(context.Background())
		assert.ErrorIs(t, err, ErrInvalid)
	}
	var nilClient *Client
	_, err := nilClient.FairMutex("x").Lock(context.Background())
	assert.ErrorIs(t, err, ErrInvalid)
	// A name with its own hash tag keeps it for every companion key.
	f := c.FairMutex("{orders}:42")
	assert.Equal(t, "{orders}:fair-queue:{orders}:42", f.queue)
	assert.True(t, keys.HasTag(f.timeouts))
}

// Waiters from several clients (processes) get the lock in the order they
// arrived, each woken alone, and the queue's keys go away with the last one.
func TestFairMutexArrivalOrderAcrossClients(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:order"
		clients := []*Client{e.client(t), e.client(t), e.client(t)}
		rdb := e.rdb(t)
		holder := clients[0].FairMutex(name)
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)

		const n = 9
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			f := clients[i%len(clients)].FairMutex(name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, err := f.Lock(context.Background())
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				assert.NoError(t, f.Unlock(ctx))
			}()
			waitQueued(t, rdb, holder, i+1) // i arrives before i+1
		}
		ks := e.keys(t)
		assert.Equal(t, []string{"fair:order", "{fair:order}:fair-queue:fair:order", "{fair:order}:fair-timeouts:fair:order"}, ks,
			"every key of the lock shares its name's hash tag")

		require.NoError(t, holder.Unlock(hctx))
		wg.Wait()
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order)
		assert.Empty(t, e.keys(t))
	})
}

// An unlock publishes exactly one message: on the channel of the waiter at
// the head of the queue.
func TestFairMutexWakesOnlyTheHead(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:wake"
		rdb := e.rdb(t)
		c := e.client(t)
		holder := c.FairMutex(name)
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)

		ps := rdb.PSubscribe(context.Background(), holder.prefix+"*")
		defer ps.Close()
		_, err = ps.Receive(context.Background()) // subscription confirmed
		require.NoError(t, err)

		var results []<-chan lockResult
		var waiters []*FairMutex
		for i := range 3 {
			f := e.client(t).FairMutex(name)
			waiters = append(waiters, f)
			results = append(results, lockAsync(context.Background(), f.Lock))
			waitQueued(t, rdb, holder, i+1)
		}
		head := fairQueue(t, rdb, holder)[0]
		require.NoError(t, holder.Unlock(hctx))

		msg, err := ps.ReceiveMessage(context.Background())
		require.NoError(t, err)
		assert.Equal(t, holder.prefix+head, msg.Channel)
		first := recvLock(t, results[0], 3*time.Second, "head")
		require.NoError(t, first.err)
		noLock(t, results[1], 100*time.Millisecond, "second waiter")
		m, err := ps.ReceiveTimeout(context.Background(), 100*time.Millisecond)
		assert.Error(t, err, "no second message (got %v)", m)

		// Release the rest in order.
		require.NoError(t, waiters[0].Unlock(first.ctx))
		for i := 1; i < 3; i++ {
			r := recvLock(t, results[i], 3*time.Second, "next waiter")
			require.NoError(t, r.err)
			require.NoError(t, waiters[i].Unlock(r.ctx))
		}
		assert.Empty(t, e.keys(t))
	})
}

// A waiter whose context ends returns the context's error at once, leaves
// the queue, and does not hold back the waiter behind it.
func TestFairMutexCancelledWaiterDoesNotHoldBackNext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:cancel"
		rdb := e.rdb(t)
		// A long waiter timeout: the next waiter must not get the lock by
		// waiting out the cancelled one's deadline.
		opt := WithWaiterTimeout(time.Minute)
		holder := e.client(t).FairMutex(name, opt)
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)

		actx, cancelA := context.WithCancel(context.Background())
		a := lockAsync(actx, e.client(t).FairMutex(name, opt).Lock)
		waitQueued(t, rdb, holder, 1)
		bf := e.client(t).FairMutex(name, opt)
		b := lockAsync(context.Background(), bf.Lock)
		waitQueued(t, rdb, holder, 2)

		cancelA()
		ra := recvLock(t, a, time.Second, "cancelled waiter")
		assert.ErrorIs(t, ra.err, context.Canceled)
		assert.Nil(t, ra.ctx, "on error Lock returns a nil context")
		// Its leave is sent as it returns, and answered a round trip later.
		eventually(t, time.Second, "the cancelled waiter out of the queue", func() bool {
			return len(fairQueue(t, rdb, holder)) == 1
		})

		lag := watchLag(t) // the machine's scheduling delay, added to the bound
		start := time.Now()
		require.NoError(t, holder.Unlock(hctx))
		rb := recvLock(t, b, 5*time.Second, "next waiter")
		require.NoError(t, rb.err)
		assert.Less(t, rb.at.Sub(start), 500*time.Millisecond+lag.Slack(),
			"the machine's worst delay meanwhile: %v", lag.Worst())
		require.NoError(t, bf.Unlock(rb.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// A waiter that heads the queue of a free lock and leaves it (its wait
// ended) wakes the next waiter at once.
func TestFairMutexLeavingHeadOfFreeLockWakesNext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:leave-head"
		rdb := e.rdb(t)
		ctx := context.Background()
		bf := e.client(t).FairMutex(name, WithWaiterTimeout(time.Minute))
		// A waiter in another process, at the head of the queue of the
		// free lock, that has not taken it yet.
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, rdb.ZAdd(ctx, bf.queue, redis.Z{Score: 1, Member: "ghost"}).Err())
		require.NoError(t, rdb.ZAdd(ctx, bf.timeouts, redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: "ghost"}).Err())

		b := lockAsync(ctx, bf.Lock)
		waitQueued(t, rdb, bf, 2)
		noLock(t, b, 100*time.Millisecond, "waiter behind the head")
		require.NoError(t, lua.FairLeave.Run(ctx, rdb, bf.keys(), "ghost", bf.prefix, "publish").Err())
		rb := recvLock(t, b, time.Second, "next waiter")
		require.NoError(t, rb.err)
		require.NoError(t, bf.Unlock(rb.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// A waiter whose process dies (its connection is closed; nobody leaves the
// queue for it) is skipped within the waiter timeout.
func TestFairMutexCrashedWaiterSkippedWithinBound(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:crashed-waiter"
		const bound = 600 * time.Millisecond
		rdb := e.rdb(t)
		opt := WithWaiterTimeout(bound)
		holder := e.client(t).FairMutex(name, opt)
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)

		crashed, crash := crashableRDB(t, e.addr)
		cf := newClient(t, crashed).FairMutex(name, opt)
		a := lockAsync(context.Background(), cf.Lock)
		waitQueued(t, rdb, holder, 1)
		bf := e.client(t).FairMutex(name, opt)
		b := lockAsync(context.Background(), bf.Lock)
		waitQueued(t, rdb, holder, 2)

		lag := watchLag(t)
		crash()
		crashedAt := time.Now()
		require.NoError(t, holder.Unlock(hctx))
		rb := recvLock(t, b, 3*time.Second, "waiter behind the crashed one")
		require.NoError(t, rb.err)
		waited := rb.at.Sub(crashedAt)
		t.Logf("crashed waiter skipped after %v (bound %v)", waited, bound)
		assert.Less(t, waited, bound+300*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		ra := recvLock(t, a, 3*time.Second, "crashed waiter")
		assert.Error(t, ra.err, "the crashed side's Lock fails")
		require.NoError(t, bf.Unlock(rb.ctx))
		eventually(t, 2*bound, "no keys left", func() bool { return len(e.keys(t)) == 0 })
	})
}

// A live waiter keeps its place however long it waits: its presence is
// refreshed, so waiting much longer than the waiter timeout loses nothing.
func TestFairMutexLiveWaiterKeepsPlace(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "fair:patient"
		const bound = 150 * time.Millisecond
		rdb := e.rdb(t)
		opt := WithWaiterTimeout(bound)
		holder := e.client(t).FairMutex(name, opt)
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)
		af := e.client(t).FairMutex(name, opt)
		a := lockAsync(context.Background(), af.Lock)
		waitQueued(t, rdb, holder, 1)
		bf := e.client(t).FairMutex(name, opt)
		b := lockAsync(context.Background(), bf.Lock)
		waitQueued(t, rdb, holder, 2)
		first := fairQueue(t, rdb, holder)

		time.Sleep(5 * bound) // the waiters outlive their timeout several times over
		assert.Equal(t, first, fairQueue(t, rdb, holder), "both waiters kept their places")
		require.NoError(t, holder.Unlock(hctx))
		ra := recvLock(t, a, time.Second, "first waiter")
		require.NoError(t, ra.err)
		noLock(t, b, 50*time.Millisecond, "second waiter")
		require.NoError(t, af.Unlock(ra.ctx))
		rb := recvLock(t, b, time.Second, "second waiter")
		require.NoError(t, rb.err)
		require.NoError(t, bf.Unlock(rb.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// Every key of a fair lock shares one Cluster slot (its scripts would fail
// with CROSSSLOT otherwise), and the head waiter is woken across the cluster.
func TestFairMutexOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	rdb := cl.Client(t)
	a := newClient(t, cl.Client(t))
	b := newClient(t, cl.Client(t))
	for _, name := range []string{"fair-cl", "{app}:fair-cl"} {
		fa, fb := a.FairMutex(name), b.FairMutex(name)
		hctx, err := fa.Lock(context.Background())
		require.NoError(t, err)
		var results []<-chan lockResult
		for i := range 3 {
			results = append(results, lockAsync(context.Background(), fb.Lock))
			waitQueued(t, rdb, fa, i+1)
		}
		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, fa.Unlock(hctx))
		for _, ch := range results {
			r := recvLock(t, ch, 3*time.Second, name)
			require.NoError(t, r.err)
			// Polled, the head would wait a third of the 30s lease.
			assert.Less(t, r.at.Sub(start), time.Second+lag.Slack(), "woken, not polled (the machine's worst delay meanwhile: %v)", lag.Worst())
			require.NoError(t, fb.Unlock(r.ctx))
		}
		locked, err := fa.IsLocked(context.Background())
		require.NoError(t, err)
		assert.False(t, locked)
	}
}

// A wait ends soon after its context even when Redis stops answering: the
// queue entry is removed in the background, bounded by go-redis's timeouts,
// instead of holding the caller for them.
func TestFairMutexWaitEndsPromptlyWhenRedisIsSilent(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	holder := e.client(t).FairMutex("silent")
	hctx, err := holder.Lock(context.Background())
	require.NoError(t, err)
	proxy := newProxy(t, e.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	var done atomic.Int64 // scripts the waiter's client has finished
	gate(rdb, doneHook{&done})
	c := newClient(t, rdb)
	m := c.FairMutex("silent")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := m.Lock(ctx); errc <- err }()
	// The waiter queued, subscribed and made its retry: it is waiting, not
	// in the middle of a script (a script already sent runs to completion,
	// bounded by go-redis's timeouts, whatever ctx does).
	eventually(t, 5*time.Second, "the waiter waiting", func() bool {
		return done.Load() >= 2 && semWaiters(c) == 1
	})
	lag := watchLag(t)
	proxy.Blackhole(true)
	cancel()
	start := time.Now()
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, context.Canceled)
		// Held by the silent Redis, it would wait go-redis's 3s.
		assert.Less(t, time.Since(start), 500*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	case <-time.After(10 * time.Second):
		t.Fatal("the wait was held by a silent Redis")
	}
	require.NoError(t, holder.Unlock(hctx))
}

// A key of another type is refused with WRONGTYPE and kept as it was, on the
// paths that run while no queue exists too: the lock's key, the queue's key,
// and the deadlines' key when a waiter would join the queue.
func TestFairMutexRefusesForeignKeys(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		rdb := e.rdb(t)
		f := e.client(t).FairMutex("fair:foreign")
		wrongType := func(err error, what string) {
			t.Helper()
			require.Error(t, err, what)
			assert.Contains(t, err.Error(), "WRONGTYPE", what)
		}

		// The lock's key.
		require.NoError(t, rdb.Set(ctx, f.name, "x", 0).Err())
		_, err := f.TryLock(ctx)
		wrongType(err, "TryLock on a string")
		_, err = f.Lock(ctx)
		wrongType(err, "Lock on a string")
		err = lua.FairUnlock.Run(ctx, rdb, f.keys(), "someone:1", 1, 30000, f.prefix, "publish").Err()
		wrongType(err, "unlock of a string")
		err = lua.FairUnlock.Run(ctx, rdb, f.keys(), "someone:1", 2, 30000, f.prefix, "publish").Err()
		wrongType(err, "unlock of one re-entry of a string")
		v, err := rdb.Get(ctx, f.name).Result()
		require.NoError(t, err)
		assert.Equal(t, "x", v)
		assert.Equal(t, []string{f.name}, e.keys(t), "nothing else written")
		require.NoError(t, rdb.Del(ctx, f.name).Err())

		// The queue's key, with the lock free.
		require.NoError(t, rdb.Set(ctx, f.queue, "q", 0).Err())
		_, err = f.TryLock(ctx)
		wrongType(err, "TryLock with a string queue")
		v, err = rdb.Get(ctx, f.queue).Result()
		require.NoError(t, err)
		assert.Equal(t, "q", v)
		assert.Equal(t, []string{f.queue}, e.keys(t), "the lock was not taken")
		require.NoError(t, rdb.Del(ctx, f.queue).Err())

		// The deadlines' key, when a waiter would create the queue.
		hctx, err := f.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, f.timeouts, "t", 0).Err())
		_, err = e.client(t).FairMutex(f.name).Lock(ctx)
		wrongType(err, "queueing with a string deadlines key")
		v, err = rdb.Get(ctx, f.timeouts).Result()
		require.NoError(t, err)
		assert.Equal(t, "t", v)
		assert.Empty(t, fairQueue(t, rdb, f), "the queue was not written")
		require.NoError(t, rdb.Del(ctx, f.timeouts).Err())
		require.NoError(t, f.Unlock(hctx))
		assert.Empty(t, e.keys(t))
	})
}

// Every fair lock script go-redis may resend gives the same state and the
// same answer twice, with and without a queue.
func TestFairMutexResentScriptsCountOnce(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		rdb := e.rdb(t)
		f := e.client(t).FairMutex("fair:resent")
		ks := f.keys()
		lock := func(field string, count int, waiterMs int64) []int64 {
			t.Helper()
			r, err := lua.FairLock.Run(ctx, rdb, ks, 30000, field, count, waiterMs, f.prefix, "publish").Int64Slice()
			require.NoError(t, err)
			return r
		}
		unlock := func(field string, count int) int64 {
			t.Helper()
			r, err := lua.FairUnlock.Run(ctx, rdb, ks, field, count, 30000, f.prefix, "publish").Int64()
			require.NoError(t, err)
			return r
		}
		count := func(field string) string {
			t.Helper()
			v, err := rdb.HGet(ctx, f.name, field).Result()
			if isNil(err) {
				return ""
			}
			require.NoError(t, err)
			return v
		}

		// No queue: first hold, re-entry, unlocks.
		for range 2 {
			assert.Equal(t, []int64{1, 1}, lock("a:1", 0, 60000))
			assert.Equal(t, "1", count("a:1"))
		}
		for range 2 {
			assert.Equal(t, []int64{1, 2}, lock("a:1", 1, 60000))
			assert.Equal(t, "2", count("a:1"))
		}
		for range 2 {
			assert.Equal(t, int64(1), unlock("a:1", 2))
			assert.Equal(t, "1", count("a:1"))
		}
		assert.Equal(t, []string{f.name}, e.keys(t), "no queue keys while nobody waits")

		// Queueing twice keeps the first place.
		for range 2 {
			r := lock("b:1", 0, 60000)
			assert.Equal(t, int64(0), r[0])
			r = lock("c:1", 0, 60000)
			assert.Equal(t, int64(0), r[0])
			assert.Equal(t, []string{"b:1", "c:1"}, fairQueue(t, rdb, f))
		}
		// A re-entry with waiters queued.
		assert.Equal(t, []int64{1, 2}, lock("a:1", 1, 60000))
		assert.Equal(t, int64(1), unlock("a:1", 2))

		// The last unlock releases once; a resend finds the hold gone and
		// says so (3: the caller knows whether it was a resend), changing
		// nothing.
		assert.Equal(t, int64(2), unlock("a:1", 1))
		assert.Equal(t, int64(3), unlock("a:1", 1))
		assert.Equal(t, "", count("a:1"))
		// A re-entry whose hold is gone is refused, not re-created.
		assert.Equal(t, []int64{-1, 0}, lock("a:1", 1, 60000))
		assert.Equal(t, "", count("a:1"))
		// The head takes it, once; a resend re-enters to the same count.
		for range 2 {
			assert.Equal(t, []int64{1, 1}, lock("b:1", 0, 60000))
			assert.Equal(t, []string{"c:1"}, fairQueue(t, rdb, f))
		}
		assert.Equal(t, int64(2), unlock("b:1", 1))
		assert.Equal(t, []int64{1, 1}, lock("c:1", 0, 60000))
		assert.Equal(t, int64(2), unlock("c:1", 1))
		assert.Equal(t, int64(3), unlock("c:1", 1))
		assert.Equal(t, int64(0), unlock("c:1", 2), "a hold that should remain is gone")
		assert.Empty(t, e.keys(t))
	})
}

// Waiters whose deadline has passed are dropped before the head is woken:
// by the last unlock, and by an attempt on a free lock promised to a dead
// head (which wakes the new head). The live waiter behind a dead head is
// woken, not left to its own timer.
func TestFairMutexExpiredHeadSkippedAtOnce(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		rdb := e.rdb(t)
		// Long timeouts: the waiter's own timers would not fire in time.
		opt := WithWaiterTimeout(time.Minute)
		bf := e.client(t).FairMutex("fair:expired-head", opt)
		ghost := func(deadline time.Time) {
			t.Helper()
			require.NoError(t, rdb.ZAdd(ctx, bf.queue, redis.Z{Score: 0, Member: "ghost"}).Err())
			require.NoError(t, rdb.ZAdd(ctx, bf.timeouts, redis.Z{Score: float64(deadline.UnixMilli()), Member: "ghost"}).Err())
		}
		now, err := rdb.Time(ctx).Result()
		require.NoError(t, err)

		// The last unlock drops the expired head and wakes the live one.
		holder := e.client(t).FairMutex(bf.name, opt)
		hctx, err := holder.Lock(ctx)
		require.NoError(t, err)
		b := lockAsync(ctx, bf.Lock)
		waitQueued(t, rdb, bf, 1)
		ghost(now.Add(-time.Second))
		require.Equal(t, "ghost", fairQueue(t, rdb, bf)[0])
		require.NoError(t, holder.Unlock(hctx))
		rb := recvLock(t, b, time.Second, "waiter behind an expired head, at unlock")
		require.NoError(t, rb.err)
		require.NoError(t, bf.Unlock(rb.ctx))
		assert.Empty(t, e.keys(t))

		// A free lock promised to a head that expires while the next waits:
		// another owner's TryLock drops it and wakes the next.
		ghost(now.Add(time.Minute))
		b = lockAsync(ctx, bf.Lock)
		waitQueued(t, rdb, bf, 2)
		noLock(t, b, 100*time.Millisecond, "waiter behind a live head")
		ghost(now.Add(-time.Second))
		_, err = e.client(t).FairMutex(bf.name, opt).TryLock(ctx)
		assert.ErrorIs(t, err, ErrNotAcquired, "TryLock does not jump the queue")
		rb = recvLock(t, b, time.Second, "waiter behind an expired head, at a try")
		require.NoError(t, rb.err)
		require.NoError(t, bf.Unlock(rb.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// commandCalls returns Redis's per-command call counts (INFO commandstats).
func commandCalls(t testing.TB, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var n int
		_, err := fmt.Sscanf(rest, "%d", &n)
		require.NoError(t, err)
		calls[name] = n
	}
	return calls
}

// The Redis commands of a Lock+Unlock pair while nobody waits: the cost of a
// plain Mutex plus one read of the queue each way; no clock read, no purge.
func TestFairMutexUncontendedCost(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	rdb := e.rdb(t)
	f := e.client(t).FairMutex("fair:cost")
	pair := func() {
		hctx, err := f.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Unlock(hctx))
	}
	pair() // load the scripts, open the connections
	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	pair()
	assert.Equal(t, map[string]int{
		"evalsha": 2,
		"pttl":    1, "zrange": 2, "hset": 1, "pexpire": 1, // Lock
		"hdel": 1, // Unlock
	}, commandCalls(t, rdb))
	assert.Empty(t, e.keys(t))
}

// doneHook counts the scripts a client has finished.
type doneHook struct{ n *atomic.Int64 }

func (doneHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h doneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return err
	}
}
func (h doneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.n.Add(1)
			}
		}
		return err
	}
}
