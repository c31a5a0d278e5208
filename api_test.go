package redisync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
)

// Tests of the hold contract (DESIGN.md, "Public API"): a hold lives exactly
// as long as the context it was taken with, TryLockFor bounds only the wait,
// re-entry is per lock, errors name what they are about. Every primitive
// that holds is driven through one small interface, apiOps, so each rule is
// checked the same way for Mutex, FairMutex, both sides of RWMutex and
// Semaphore.

// apiOps is one way of holding a primitive, through one Client's handle.
type apiOps struct {
	lock   func(context.Context) (context.Context, error)
	try    func(context.Context) (context.Context, error)
	tryFor func(context.Context, time.Duration) (context.Context, error)
	unlock func(context.Context) error
	// do and doFor are the one-call forms (Do, DoFor; RDo, RDoFor).
	do    func(context.Context, func(context.Context) error) error
	doFor func(context.Context, time.Duration, func(context.Context) error) error
	count func(context.Context) int // holds of ctx's hold, as Redis has them
	busy  func() bool               // Redis says someone holds it (this way)
}

// apiKind is a primitive: mine is the way the tests hold it, rival a way of
// holding it that excludes mine and is excluded by it.
type apiKind struct {
	name  string // subtest name
	event Kind   // HoldEvent.Kind
	setup func(t *testing.T, c *Client, name string)
	mine  func(t *testing.T, c *Client, name string) apiOps
	rival func(t *testing.T, c *Client, name string) apiOps
	// units is what a hold of mine, and of rival, takes of the lock's
	// capacity: an exclusive lock has one unit, which each takes.
	capacity, mineUnits, rivalUnits int
	// force is ForceUnlock through c; nil when the primitive has none.
	force func(c *Client, name string) (bool, error)
	// holdName is HoldEvent.Name for name (nil: name itself).
	holdName func(name string) string
}

// nameOf is HoldEvent.Name of k's hold for name.
func (k apiKind) nameOf(name string) string {
	if k.holdName == nil {
		return name
	}
	return k.holdName(name)
}

// shared reports whether holds of mine can overlap (readers, permits).
func (k apiKind) shared() bool { return k.mineUnits < k.capacity }

func noSetup(*testing.T, *Client, string) {}

func mutexOps(t *testing.T, c *Client, name string) apiOps {
	m := c.Mutex(name)
	return apiOps{
		lock: m.Lock, try: m.TryLock, tryFor: m.TryLockFor, unlock: m.Unlock, do: m.Do, doFor: m.DoFor,
		count: func(ctx context.Context) int {
			n, err := m.HoldCount(ctx)
			countErrOK(t, ctx, err)
			return n
		},
		busy: func() bool {
			b, err := m.IsLocked(context.Background())
			assert.NoError(t, err)
			return b
		},
	}
}

func fairOps(t *testing.T, c *Client, name string) apiOps {
	f := c.FairMutex(name)
	return apiOps{
		lock: f.Lock, try: f.TryLock, tryFor: f.TryLockFor, unlock: f.Unlock, do: f.Do, doFor: f.DoFor,
		count: func(ctx context.Context) int {
			n, err := f.HoldCount(ctx)
			countErrOK(t, ctx, err)
			return n
		},
		busy: func() bool {
			b, err := f.IsLocked(context.Background())
			assert.NoError(t, err)
			return b
		},
	}
}

// countErrOK checks a HoldCount's error: there is none, unless ctx ended
// before or during the call (a test that polls a hold's context may ask
// just as the hold ends).
func countErrOK(t *testing.T, ctx context.Context, err error) {
	t.Helper()
	if ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return
	}
	assert.NoError(t, err)
}

func rwWriteOps(t *testing.T, c *Client, name string) apiOps {
	r := c.RWMutex(name)
	return apiOps{
		lock: r.Lock, try: r.TryLock, tryFor: r.TryLockFor, unlock: r.Unlock, do: r.Do, doFor: r.DoFor,
		count: func(ctx context.Context) int {
			n, err := r.HoldCount(ctx)
			countErrOK(t, ctx, err)
			return n
		},
		busy: func() bool {
			_, b, err := rwHeld(context.Background(), r)
			assert.NoError(t, err)
			return b
		},
	}
}

func rwReadOps(t *testing.T, c *Client, name string) apiOps {
	r := c.RWMutex(name)
	return apiOps{
		lock: r.RLock, try: r.TryRLock, tryFor: r.TryRLockFor, unlock: r.RUnlock, do: r.RDo, doFor: r.RDoFor,
		count: func(ctx context.Context) int {
			n, err := r.RHoldCount(ctx)
			countErrOK(t, ctx, err)
			return n
		},
		busy: func() bool {
			n, err := rwReaders(context.Background(), r)
			assert.NoError(t, err)
			return n > 0
		},
	}
}

// apiSemTotal is the total of the semaphores of these tests: mine takes one
// permit at a time, rival all of them.
const apiSemTotal = 2

func semSetup(t *testing.T, c *Client, name string) {
	require.NoError(t, c.Semaphore(name).SetPermits(context.Background(), apiSemTotal))
}

func semOps(n int) func(t *testing.T, c *Client, name string) apiOps {
	return func(t *testing.T, c *Client, name string) apiOps {
		s := c.Semaphore(name)
		return apiOps{
			lock:   func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, n) },
			try:    func(ctx context.Context) (context.Context, error) { return s.TryAcquire(ctx, n) },
			tryFor: func(ctx context.Context, d time.Duration) (context.Context, error) { return s.TryAcquireFor(ctx, n, d) },
			unlock: func(ctx context.Context) error { return s.Release(ctx, n) },
			do:     func(ctx context.Context, fn func(context.Context) error) error { return s.Do(ctx, n, fn) },
			doFor: func(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
				return s.DoFor(ctx, n, d, fn)
			},
			count: func(ctx context.Context) int {
				h := holds.Held(ctx, s.spec.Ref)
				if h == nil {
					return 0
				}
				v, err := c.rdb.HGet(context.Background(), s.keys[1], h.Field).Int()
				if isNil(err) {
					return 0
				}
				assert.NoError(t, err)
				return v
			},
			busy: func() bool {
				a, err := s.Available(context.Background())
				assert.NoError(t, err)
				return a < apiSemTotal
			},
		}
	}
}

// apiRWUnits is an RWMutex's capacity in these tests: a reader takes one
// unit, a writer all of them.
const apiRWUnits = 64

var apiKinds = []apiKind{
	{name: "Mutex", event: KindMutex, setup: noSetup, mine: mutexOps, rival: mutexOps,
		capacity: 1, mineUnits: 1, rivalUnits: 1,
		force: func(c *Client, name string) (bool, error) { return c.Mutex(name).ForceUnlock(context.Background()) }},
	{name: "FairMutex", event: KindFairMutex, setup: noSetup, mine: fairOps, rival: fairOps,
		capacity: 1, mineUnits: 1, rivalUnits: 1,
		force: func(c *Client, name string) (bool, error) { return c.FairMutex(name).ForceUnlock(context.Background()) }},
	{name: "RWMutexWrite", event: KindRWWrite, setup: noSetup, mine: rwWriteOps, rival: rwWriteOps,
		capacity: 1, mineUnits: 1, rivalUnits: 1,
		force: func(c *Client, name string) (bool, error) { return c.RWMutex(name).ForceUnlock(context.Background()) }},
	{name: "RWMutexRead", event: KindRWRead, setup: noSetup, mine: rwReadOps, rival: rwWriteOps,
		capacity: apiRWUnits, mineUnits: 1, rivalUnits: apiRWUnits,
		force: func(c *Client, name string) (bool, error) { return c.RWMutex(name).ForceUnlock(context.Background()) }},
	{name: "Semaphore", event: KindSemaphore, setup: semSetup, mine: semOps(1), rival: semOps(apiSemTotal),
		capacity: apiSemTotal, mineUnits: 1, rivalUnits: apiSemTotal},
	{name: "MultiLock", event: KindMultiLock, setup: noSetup, mine: multiOps, rival: mutexOps, holdName: multiHoldName,
		capacity: 1, mineUnits: 1, rivalUnits: 1,
		force: func(c *Client, name string) (bool, error) { return c.Mutex(name).ForceUnlock(context.Background()) }},
}

// forEachEnvKind runs fn for every primitive, against miniredis and a
// real redis-server (forEachEnv), with a lock name of its own; all in
// parallel, each on a Redis of its own.
func forEachEnvKind(t *testing.T, fn func(t *testing.T, e *testEnv, k apiKind, name string)) {
	t.Helper()
	forEachKindOn(t, []envMaker{{"miniredis", miniEnv}, {"redis", realEnv}}, fn)
}

// forEachRealKind is forEachEnvKind on real redis-servers only, for what
// miniredis does not do (CLIENT KILL, replication).
func forEachRealKind(t *testing.T, fn func(t *testing.T, e *testEnv, k apiKind, name string)) {
	t.Helper()
	forEachKindOn(t, []envMaker{{"redis", realEnv}}, fn)
}

type envMaker struct {
	name string
	new  func(t *testing.T) *testEnv
}

func forEachKindOn(t *testing.T, envs []envMaker, fn func(t *testing.T, e *testEnv, k apiKind, name string)) {
	t.Helper()
	for _, env := range envs {
		t.Run(env.name, func(t *testing.T) {
			t.Parallel()
			for _, k := range apiKinds {
				t.Run(k.name, func(t *testing.T) { t.Parallel(); fn(t, env.new(t), k, "api:"+k.name) })
			}
		})
	}
}

// redisState describes every key in Redis and its content (zset members
// without their scores, which renewals move), to show that an operation
// left nothing behind.
func redisState(t testing.TB, e *testEnv) string {
	t.Helper()
	ctx := context.Background()
	rdb := e.rdb(t)
	var b strings.Builder
	for _, k := range e.keys(t) {
		typ, err := rdb.Type(ctx, k).Result()
		require.NoError(t, err)
		var v any
		switch typ {
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			var m map[string]string
			m, err = rdb.HGetAll(ctx, k).Result()
			var kv []string
			for f, x := range m {
				kv = append(kv, f+"="+x)
			}
			sort.Strings(kv)
			v = kv
		case "zset":
			v, err = rdb.ZRange(ctx, k, 0, -1).Result()
		}
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s %s %v\n", k, typ, v)
	}
	return b.String()
}

// noLocalWaiters asserts that c waits on no channel.
func noLocalWaiters(t *testing.T, c *Client) {
	t.Helper()
	assert.Empty(t, c.ps.Channels(), "no wait left subscribed")
}

// 1. A hold never outlives the context it was taken with: when that context
// ends, every context of the hold (re-entries included) is done, the lock is
// released in Redis and a waiter in another Client gets it at once (not
// after the 30s watchdog lease), and a later Unlock returns nil. While the
// hold's context is live, the owner holds the lock.
func TestAPIHoldEndsWithItsContext(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2, c3 := e.client(t), e.client(t), e.client(t)
		k.setup(t, c1, name)
		base := redisState(t, e)
		mine := k.mine(t, c1, name)

		// Long enough that the checks below see the hold live several
		// times on a loaded machine (300ms once left only 4 polls).
		ctx, cancel := context.WithTimeout(bg, time.Second)
		defer cancel()
		hctx, err := mine.lock(ctx)
		require.NoError(t, err)
		rctx, err := mine.lock(hctx) // re-entry
		require.NoError(t, err)
		require.Equal(t, 2, mine.count(hctx))
		_, err = k.rival(t, c3, name).try(bg)
		require.ErrorIs(t, err, ErrNotAcquired, "held by the context's hold")

		waiter := k.rival(t, c2, name)
		wctx, wcancel := context.WithTimeout(bg, 10*time.Second)
		defer wcancel()
		got := lockAsync(wctx, waiter.lock)
		// And one in the holder's own Client, a fresh owner.
		local := k.rival(t, c1, name)
		gotLocal := lockAsync(wctx, local.lock)

		// While the hold's context is live, Redis has the hold.
		lag := watchLag(t)
		polls := 0
		for {
			busy, n := mine.busy(), mine.count(hctx)
			if hctx.Err() != nil {
				break
			}
			polls++
			require.True(t, busy, "the hold's context is live: the lock must be held")
			require.Equal(t, 2, n, "the hold's context is live: both holds must be there")
			time.Sleep(10 * time.Millisecond)
		}
		ended := time.Now()
		assert.Greater(t, polls, 5)
		require.Error(t, rctx.Err(), "the re-entry's context ends with the hold")
		assert.ErrorIs(t, context.Cause(hctx), context.DeadlineExceeded)
		assert.NotErrorIs(t, context.Cause(hctx), ErrLeaseLost)

		// One of the two waiters gets the lock promptly (not after the
		// lease), then the other once the first lets go.
		var r lockResult
		second, wfirst, wsecond := gotLocal, waiter, local
		select {
		case r = <-got:
		case r = <-gotLocal:
			second, wfirst, wsecond = got, local, waiter
		case <-time.After(2 * time.Second):
			t.Fatal("no waiter got the lock within 2s of the hold's context ending")
		}
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(ended), time.Second+lag.Slack(),
			"a waiter gets the lock promptly, not after the lease (the machine's worst delay meanwhile: %v)", lag.Worst())
		assert.Zero(t, mine.count(hctx), "a done hold holds nothing")
		assert.NoError(t, mine.unlock(rctx), "Unlock after the hold ended with its context")
		assert.NoError(t, mine.unlock(hctx), "Unlock after the hold ended with its context")
		assert.True(t, wfirst.busy(), "those Unlocks do not touch the waiter's hold")
		assert.Positive(t, wfirst.count(r.ctx))
		noLock(t, second, 100*time.Millisecond, "the other waiter")
		unlocked := time.Now()
		require.NoError(t, wfirst.unlock(r.ctx))
		r2 := recvLock(t, second, 2*time.Second, "the second waiter")
		require.NoError(t, r2.err)
		assert.Less(t, r2.at.Sub(unlocked), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		require.NoError(t, wsecond.unlock(r2.ctx))
		assert.Equal(t, base, redisState(t, e))
	})
}

// 1, with cancellation: the lock is free in Redis for another Client's
// TryLock within a second of the cancel.
func TestAPIHoldEndsWhenItsContextIsCancelled(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		k.setup(t, c1, name)
		base := redisState(t, e)
		mine, other := k.mine(t, c1, name), k.rival(t, c2, name)

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		hctx, err := mine.lock(ctx)
		require.NoError(t, err)
		rctx, err := mine.lock(hctx)
		require.NoError(t, err)
		require.Equal(t, 2, mine.count(rctx))
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, hctx.Err())
		require.True(t, mine.busy())

		cancel()
		start := time.Now()
		select {
		case <-rctx.Done():
		case <-time.After(time.Second):
			t.Fatal("the re-entry's context did not end with the hold's")
		}
		require.Error(t, hctx.Err())
		assert.ErrorIs(t, context.Cause(hctx), context.Canceled)
		var octx context.Context
		eventually(t, time.Second, "another Client's TryLock to succeed", func() bool {
			octx, err = other.try(bg)
			return err == nil
		})
		t.Logf("free in Redis %v after the cancel", time.Since(start))
		assert.NoError(t, mine.unlock(rctx))
		assert.NoError(t, mine.unlock(hctx))
		assert.True(t, other.busy())
		require.NoError(t, other.unlock(octx))
		assert.Equal(t, base, redisState(t, e))
	})
}

// 1, downgrade: a read hold taken through a write hold's context survives the
// write Unlock, and ends (released in Redis) when the context the write hold
// was taken with ends.
func TestAPIDowngradeEndsWithTheWriteHoldsContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		r := e.client(t).RWMutex("api:downgrade")
		other := e.client(t).RWMutex("api:downgrade")

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		wctx, err := r.Lock(ctx)
		require.NoError(t, err)
		rctx, err := r.RLock(wctx)
		require.NoError(t, err)
		require.NoError(t, r.Unlock(wctx))
		require.Error(t, wctx.Err(), "the write hold ended")

		time.Sleep(50 * time.Millisecond)
		require.NoError(t, rctx.Err(), "the read hold survives the write Unlock")
		n, err := r.RHoldCount(rctx)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		readers, err := rwReaders(bg, other)
		require.NoError(t, err)
		assert.Equal(t, 1, readers)
		_, err = other.TryLock(bg)
		require.ErrorIs(t, err, ErrNotAcquired, "the read hold keeps writers out")

		got := lockAsync(bg, other.Lock)
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, rctx.Err())
		cancel() // the context the write hold was taken with
		select {
		case <-rctx.Done():
		case <-time.After(time.Second):
			t.Fatal("the read hold did not end with the write hold's context")
		}
		res := recvLock(t, got, time.Second, "the writer waiting in another Client")
		require.NoError(t, res.err)
		assert.NoError(t, r.RUnlock(rctx))
		require.NoError(t, other.Unlock(res.ctx))
		assert.Empty(t, e.keys(t))
	})
}

// 2. TryLockFor waits at most wait, then fails with ErrNotAcquired (not
// DeadlineExceeded) and leaves nothing behind.
func TestAPITryLockForWaitsAtMostWait(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		k.setup(t, c1, name)
		rival := k.rival(t, c2, name)
		held, err := rival.lock(bg)
		require.NoError(t, err)
		before := redisState(t, e)
		mine := k.mine(t, c1, name)

		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		const wait = 300 * time.Millisecond
		lag := watchLag(t)
		start := time.Now()
		got, err := mine.tryFor(ctx, wait)
		took := time.Since(start)
		require.Error(t, err)
		assert.Nil(t, got, "on error it returns a nil context")
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "ctx did not end: only the wait ran out")
		assert.Contains(t, err.Error(), name)
		assert.GreaterOrEqual(t, took, wait)
		assert.Less(t, took, wait+700*time.Millisecond+lag.Slack(),
			"returns after wait, not ctx's deadline (the machine's worst delay meanwhile: %v)", lag.Worst())
		assert.NoError(t, ctx.Err())
		// The queue entry is taken out in the background, at once: the
		// wait does not wait for it (issue 24, #12).
		eventually(t, time.Second, "nothing left behind (queue entry, waiter, permit)", func() bool {
			return redisState(t, e) == before
		})
		noLocalWaiters(t, c1)

		// Non-positive waits are refused, changing nothing.
		for _, d := range []time.Duration{0, -time.Second} {
			_, err := mine.tryFor(ctx, d)
			assert.ErrorIs(t, err, ErrInvalid, "wait %v", d)
			assert.NotErrorIs(t, err, ErrNotAcquired, "wait %v", d)
		}
		assert.Equal(t, before, redisState(t, e))
		require.NoError(t, rival.unlock(held))
		free := redisState(t, e)
		for _, d := range []time.Duration{0, -time.Millisecond} {
			_, err := mine.tryFor(bg, d)
			assert.ErrorIs(t, err, ErrInvalid, "wait %v on a free lock", d)
		}
		assert.Equal(t, free, redisState(t, e), "a refused wait takes nothing")
	})
}

// 2. When ctx ends before the wait bound, TryLockFor returns ctx's error.
func TestAPITryLockForContextEndsFirst(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		k.setup(t, c1, name)
		rival := k.rival(t, c2, name)
		held, err := rival.lock(bg)
		require.NoError(t, err)
		before := redisState(t, e)
		mine := k.mine(t, c1, name)

		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		defer cancel()
		lag := watchLag(t)
		start := time.Now()
		_, err = mine.tryFor(ctx, 3*time.Second)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), name)
		// With ctx, not with the 3s wait.
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())

		cctx, ccancel := context.WithCancel(bg)
		time.AfterFunc(100*time.Millisecond, ccancel)
		_, err = mine.tryFor(cctx, 3*time.Second)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), name)

		// A context that already ended: no attempt at all.
		_, err = mine.tryFor(cctx, time.Second)
		assert.ErrorIs(t, err, context.Canceled)
		_, err = mine.lock(cctx)
		assert.ErrorIs(t, err, context.Canceled)

		eventually(t, time.Second, "nothing left behind", func() bool { return redisState(t, e) == before })
		noLocalWaiters(t, c1)
		require.NoError(t, rival.unlock(held))
		free := redisState(t, e)
		_, err = mine.tryFor(cctx, time.Second)
		assert.ErrorIs(t, err, context.Canceled, "even on a free lock")
		_, err = mine.lock(cctx)
		assert.ErrorIs(t, err, context.Canceled, "even on a free lock")
		assert.Equal(t, free, redisState(t, e), "a done context takes nothing")
	})
}

// 2. A hold TryLockFor gets lasts as long as ctx, past the wait bound; it
// ends with ctx.
func TestAPITryLockForHoldOutlivesTheWait(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2, c3 := e.client(t), e.client(t), e.client(t)
		k.setup(t, c1, name)
		base := redisState(t, e)
		rival := k.rival(t, c2, name)
		held, err := rival.lock(bg)
		require.NoError(t, err)
		mine := k.mine(t, c1, name)

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		const wait = 300 * time.Millisecond
		lag := watchLag(t)
		start := time.Now()
		got := lockAsync(ctx, func(ctx context.Context) (context.Context, error) { return mine.tryFor(ctx, wait) })
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, rival.unlock(held))
		r := recvLock(t, got, time.Second, "TryLockFor")
		require.NoError(t, r.err)
		hctx := r.ctx
		assert.Less(t, r.at.Sub(start), wait+lag.Slack(), "got within the wait (the machine's worst delay meanwhile: %v)", lag.Worst())

		time.Sleep(time.Until(start.Add(2 * wait)))
		require.NoError(t, hctx.Err(), "the hold outlives the wait bound")
		assert.True(t, mine.busy())
		assert.Equal(t, 1, mine.count(hctx))
		_, err = k.rival(t, c3, name).try(bg)
		assert.ErrorIs(t, err, ErrNotAcquired, "still held after the wait bound")

		cancel()
		<-hctx.Done()
		var octx context.Context
		eventually(t, time.Second, "the lock to be free once ctx ended", func() bool {
			octx, err = rival.try(bg)
			return err == nil
		})
		require.NoError(t, rival.unlock(octx))
		assert.NoError(t, mine.unlock(hctx))
		assert.Equal(t, base, redisState(t, e))
	})
}

// 3. Re-entry is per lock: goroutines handed a hold's context of lock A
// exclude each other on lock B, and share the hold on A itself.
func TestAPIReentryIsPerLock(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		// A and B of the same kind, and A a Mutex with B of every kind.
		for _, ka := range apiKinds {
			for _, kb := range apiKinds {
				if ka.name != kb.name && ka.name != "Mutex" {
					continue
				}
				t.Run(ka.name+"/"+kb.name, func(t *testing.T) {
					apiReentryIsPerLock(t, e, ka, kb)
				})
			}
		}
	})
}

func apiReentryIsPerLock(t *testing.T, e *testEnv, ka, kb apiKind) {
	bg := context.Background()
	c := e.client(t)
	nameA, nameB := "api:A:"+ka.name, "api:B:"+kb.name
	ka.setup(t, c, nameA)
	kb.setup(t, c, nameB)
	a := ka.mine(t, c, nameA)
	b := kb.rival(t, c, nameB) // B is taken exclusively
	lctx, err := a.lock(bg)
	require.NoError(t, err)

	const workers = 4
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bctx, err := b.lock(lctx)
			if !assert.NoError(t, err) {
				return
			}
			n := inside.Add(1)
			for {
				old := maxInside.Load()
				if n <= old || maxInside.CompareAndSwap(old, n) {
					break
				}
			}
			// Through the context they do re-enter A.
			actx, err := a.lock(bctx)
			if assert.NoError(t, err, "re-entering A through its hold's context") {
				assert.Equal(t, 2, a.count(actx), "a re-entry of A, inside B")
				time.Sleep(20 * time.Millisecond)
				assert.NoError(t, a.unlock(actx))
			}
			inside.Add(-1)
			assert.NoError(t, b.unlock(bctx))
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), maxInside.Load(), "a hold of A gives no ownership of B")
	assert.Equal(t, 1, a.count(lctx))
	require.NoError(t, lctx.Err())

	// WithOwner makes an acquisition of A contend instead of re-entering.
	_, err = ka.rival(t, c, nameA).try(WithOwner(lctx))
	assert.ErrorIs(t, err, ErrNotAcquired, "WithOwner contends")
	// A hold of A on this Client is nothing to another Client's handle.
	c2 := e.client(t)
	_, err = ka.rival(t, c2, nameA).try(lctx)
	assert.ErrorIs(t, err, ErrNotAcquired, "another Client's handle does not re-enter")
	assert.Zero(t, ka.mine(t, c2, nameA).count(lctx), "another Client's handle sees no hold in the context")
	assert.ErrorIs(t, ka.mine(t, c2, nameA).unlock(lctx), ErrNotHeld)

	require.NoError(t, a.unlock(lctx))
}

// 3. The same for the Mutex directly: WithOwner and another Client's handle
// contend with the hold, by the exclusive operation itself.
func TestAPIMutexWithOwnerAndOtherClientContend(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		m1, m2 := c1.Mutex("api:A"), c2.Mutex("api:A")
		lctx, err := m1.Lock(bg)
		require.NoError(t, err)
		fields, err := e.rdb(t).HGetAll(bg, "api:A").Result()
		require.NoError(t, err)

		_, err = m1.TryLock(WithOwner(lctx))
		assert.ErrorIs(t, err, ErrNotAcquired)
		wctx, cancel := context.WithTimeout(WithOwner(lctx), 100*time.Millisecond)
		defer cancel()
		_, err = m1.Lock(wctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "a Lock under WithOwner waits like anyone")
		_, err = m2.TryLock(lctx)
		assert.ErrorIs(t, err, ErrNotAcquired)
		n, err := m2.HoldCount(lctx)
		require.NoError(t, err)
		assert.Zero(t, n)

		after, err := e.rdb(t).HGetAll(bg, "api:A").Result()
		require.NoError(t, err)
		assert.Equal(t, fields, after, "one owner, one hold, untouched")
		require.NoError(t, m1.Unlock(lctx))
		assert.Empty(t, e.keys(t))
	})
}

// 3. Semaphore: an Acquire through a hold's context adds to that hold; an
// Acquire of another semaphore through it gets a fresh owner.
func TestAPISemaphoreHoldsArePerSemaphore(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		rdb := e.rdb(t)
		s1, s2 := c.Semaphore("api:s1"), c.Semaphore("api:s2")
		require.NoError(t, s1.SetPermits(bg, 5))
		require.NoError(t, s2.SetPermits(bg, 1))
		h1 := keys.Companion("api:s1", "sem-holders")
		h2 := keys.Companion("api:s2", "sem-holders")

		sctx, err := s1.Acquire(bg, 1)
		require.NoError(t, err)
		more, err := s1.Acquire(sctx, 2)
		require.NoError(t, err)
		holders, err := rdb.HGetAll(bg, h1).Result()
		require.NoError(t, err)
		require.Len(t, holders, 1, "one owner: the hold's")
		for _, v := range holders {
			assert.Equal(t, "3", v)
		}
		assert.Equal(t, 2, available(t, s1))

		// Through s1's hold, s2 gives a fresh owner each time: they exclude
		// each other on its one permit.
		var inside, maxInside atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, err := s2.Acquire(sctx, 1)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for {
					old := maxInside.Load()
					if n <= old || maxInside.CompareAndSwap(old, n) {
						break
					}
				}
				f, err := rdb.HGetAll(bg, h2).Result()
				assert.NoError(t, err)
				assert.Len(t, f, 1)
				for field := range f {
					_, shared := holders[field]
					assert.False(t, shared, "s2's owner is not s1's")
				}
				// ... and through it they add to s1's hold.
				in1, err := s1.Acquire(ctx, 1)
				if assert.NoError(t, err) {
					assert.Equal(t, 1, available(t, s1))
					assert.NoError(t, s1.Release(in1, 1))
				}
				time.Sleep(10 * time.Millisecond)
				inside.Add(-1)
				assert.NoError(t, s2.Release(ctx, 1))
			}()
		}
		wg.Wait()
		assert.Equal(t, int32(1), maxInside.Load())
		assert.Equal(t, 2, available(t, s1))
		assert.Equal(t, 1, available(t, s2))

		require.NoError(t, s1.Release(more, 3))
		assert.Error(t, sctx.Err(), "the hold ended with its last permit")
		assert.Equal(t, 5, available(t, s1))
		assert.Equal(t, []string{"api:s1", "api:s2"}, e.keys(t))
	})
}

// 4. A TryLock refusal names the lock, once prefixed.
func TestAPIRefusalErrorText(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		k.setup(t, c1, name)
		held, err := k.rival(t, c2, name).lock(bg)
		require.NoError(t, err)
		mine := k.mine(t, c1, name)

		_, err = mine.try(bg)
		require.ErrorIs(t, err, ErrNotAcquired)
		msg := err.Error()
		assert.Equal(t, 1, strings.Count(msg, "redisync:"), "one prefix: %q", msg)
		assert.Contains(t, msg, fmt.Sprintf("%q", name))
		t.Logf("TryLock: %s", msg)

		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		defer cancel()
		_, err = mine.lock(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", name))
		assert.Equal(t, 1, strings.Count(err.Error(), "redisync:"), "%q", err.Error())
		t.Logf("Lock, deadline: %s", err)

		cctx, ccancel := context.WithCancel(bg)
		time.AfterFunc(100*time.Millisecond, ccancel)
		_, err = mine.lock(cctx)
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), fmt.Sprintf("%q", name))
		t.Logf("Lock, cancelled: %s", err)
		require.NoError(t, k.rival(t, c2, name).unlock(held))
	})
}

var scriptSHA = regexp.MustCompile(`[0-9a-f]{40}`)

// assertWrongType checks an error about a key of another type: it matches
// ErrWrongType, names the key and says WRONGTYPE, without Redis's script
// details.
func assertWrongType(t *testing.T, err error, key, what string) {
	t.Helper()
	if !assert.Error(t, err, what) {
		return
	}
	msg := err.Error()
	assert.ErrorIs(t, err, ErrWrongType, what)
	assert.Contains(t, msg, "WRONGTYPE", what)
	assert.Contains(t, msg, fmt.Sprintf("%q", key), what)
	assert.NotContains(t, msg, "user_script", what)
	assert.NotContains(t, msg, "script:", what)
	assert.False(t, scriptSHA.MatchString(msg), "%s: no script SHA in %q", what, msg)
	assert.Equal(t, 1, strings.Count(msg, "redisync:"), "%s: %q", what, msg)
}

// 4. A name that holds a value of another type gives an error that names the
// key and says WRONGTYPE, with no script SHA or line; the value is kept.
func TestAPIWrongTypeErrorText(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rdb := e.rdb(t)
		c := e.client(t)
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		defer cancel()
		const name = "api:taken"
		require.NoError(t, rdb.Set(bg, name, "precious", 0).Err())

		m := c.Mutex(name)
		_, err := m.Lock(ctx)
		assertWrongType(t, err, name, "Mutex.Lock")
		_, err = m.TryLock(bg)
		assertWrongType(t, err, name, "Mutex.TryLock")
		_, err = m.TryLockFor(bg, 100*time.Millisecond)
		assertWrongType(t, err, name, "Mutex.TryLockFor")

		f := c.FairMutex(name)
		_, err = f.Lock(ctx)
		assertWrongType(t, err, name, "FairMutex.Lock")
		_, err = f.TryLock(bg)
		assertWrongType(t, err, name, "FairMutex.TryLock")

		r := c.RWMutex(name)
		_, err = r.Lock(ctx)
		assertWrongType(t, err, name, "RWMutex.Lock")
		_, err = r.RLock(ctx)
		assertWrongType(t, err, name, "RWMutex.RLock")
		_, err = r.TryRLock(bg)
		assertWrongType(t, err, name, "RWMutex.TryRLock")

		s := c.Semaphore(name)
		assertWrongType(t, s.SetPermits(bg, 3), name, "Semaphore.SetPermits")
		_, err = s.Acquire(ctx, 1)
		assertWrongType(t, err, name, "Semaphore.Acquire")
		_, err = s.TryAcquire(bg, 1)
		assertWrongType(t, err, name, "Semaphore.TryAcquire")
		_, err = s.Available(bg)
		assertWrongType(t, err, name, "Semaphore.Available")

		v, err := rdb.Get(bg, name).Result()
		require.NoError(t, err)
		assert.Equal(t, "precious", v, "kept")
		assert.Equal(t, []string{name}, e.keys(t), "nothing else written")

		// A latch is a string: a hash at its name is another type.
		const lname = "api:latch-taken"
		require.NoError(t, rdb.HSet(bg, lname, "f", "v").Err())
		l := c.CountDownLatch(lname)
		assertWrongType(t, l.CountDown(bg), lname, "CountDownLatch.CountDown")
		_, err = l.Count(bg)
		assertWrongType(t, err, lname, "CountDownLatch.Count")
		_, err = l.Delete(bg)
		assertWrongType(t, err, lname, "CountDownLatch.Delete")
		hv, err := rdb.HGetAll(bg, lname).Result()
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"f": "v"}, hv, "kept")
	})
}

// 4. A semaphore whose permits were never set: TryAcquire says so; Acquire
// waits until its context ends and says so too.
func TestAPISemaphoreNeverSetErrorText(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		s := e.client(t).Semaphore("api:unset")

		_, err := s.TryAcquire(bg, 1)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), "never set")
		assert.Contains(t, err.Error(), `"api:unset"`)
		assert.Equal(t, 1, strings.Count(err.Error(), "redisync:"), "%q", err.Error())

		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		lag := watchLag(t)
		start := time.Now()
		_, err = s.Acquire(ctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "never set")
		assert.Contains(t, err.Error(), `"api:unset"`)
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())

		_, err = s.TryAcquireFor(bg, 1, 150*time.Millisecond)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "never set")
		assert.Empty(t, e.keys(t), "nothing written")
	})
}

// 5. Client.ID begins the Redis field of every owner of the Client's holds.
func TestAPIClientID(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		require.NotEmpty(t, c1.ID())
		assert.NotEqual(t, c1.ID(), c2.ID())
		assert.Equal(t, c1.ID(), c1.ID())

		for _, c := range []*Client{c1, c2} {
			m := c.Mutex("api:id")
			hctx, err := m.Lock(bg)
			require.NoError(t, err)
			fields, err := e.rdb(t).HGetAll(bg, "api:id").Result()
			require.NoError(t, err)
			require.Len(t, fields, 1)
			for f := range fields {
				assert.True(t, strings.HasPrefix(f, c.ID()+":"), "field %q begins with the client's ID %q", f, c.ID())
			}
			require.NoError(t, m.Unlock(hctx))
		}
	})
}

// obsRecorder records what an Observer is told.
type obsRecorder struct {
	mu             sync.Mutex
	acq, rel, lost []HoldEvent
	ren            []RenewalEvent
}

func (o *obsRecorder) observer() *Observer {
	return &Observer{
		Acquired:  func(_ context.Context, e HoldEvent) { o.mu.Lock(); o.acq = append(o.acq, e); o.mu.Unlock() },
		Released:  func(_ context.Context, e HoldEvent) { o.mu.Lock(); o.rel = append(o.rel, e); o.mu.Unlock() },
		LeaseLost: func(_ context.Context, e HoldEvent) { o.mu.Lock(); o.lost = append(o.lost, e); o.mu.Unlock() },
		Renewed:   func(e RenewalEvent) { o.mu.Lock(); o.ren = append(o.ren, e); o.mu.Unlock() },
	}
}

func (o *obsRecorder) get() (acq, rel, lost []HoldEvent, ren []RenewalEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]HoldEvent(nil), o.acq...), append([]HoldEvent(nil), o.rel...),
		append([]HoldEvent(nil), o.lost...), append([]RenewalEvent(nil), o.ren...)
}

// 6. Nil observers and loggers are refused.
func TestAPIObserverAndLoggerRefuseNil(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	_, err := New(rdb, WithObserver(nil))
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = New(rdb, WithLogger(nil))
	assert.ErrorIs(t, err, ErrInvalid)
}

// 6. Acquired fires once per first acquisition with how long it waited;
// Released fires once, at the last release, with how long it was held.
func TestAPIObserverAcquiredAndReleased(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		var o obsRecorder
		c := e.client(t, WithObserver(o.observer()))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)

		// Uncontended, with a re-entry. Wait and Held are checked against
		// what the test measured around them (a loaded machine stretches
		// both), not against figures of their own.
		start := time.Now()
		hctx, err := mine.lock(bg)
		require.NoError(t, err)
		took := time.Since(start)
		rctx, err := mine.lock(hctx)
		require.NoError(t, err)
		acq, rel, lost, _ := o.get()
		require.Len(t, acq, 1, "once per first acquisition, not per re-entry")
		assert.Equal(t, k.event, acq[0].Kind)
		assert.Equal(t, k.nameOf(name), acq[0].Name)
		assert.LessOrEqual(t, acq[0].Wait, took, "the wait is within the call")
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, mine.unlock(rctx))
		_, rel, _, _ = o.get()
		assert.Empty(t, rel, "not released while a hold remains")
		require.NoError(t, mine.unlock(hctx))
		heldFor := time.Since(start)
		acq, rel, lost, _ = o.get()
		assert.Len(t, acq, 1)
		require.Len(t, rel, 1, "once, at the last release")
		assert.Equal(t, k.event, rel[0].Kind)
		assert.Equal(t, k.nameOf(name), rel[0].Name)
		assert.GreaterOrEqual(t, rel[0].Held, 200*time.Millisecond)
		assert.LessOrEqual(t, rel[0].Held, heldFor, "the hold is within the calls that took and released it")
		assert.Empty(t, lost)

		// Contended: the wait is reported.
		rival := k.rival(t, e.client(t), name)
		held, err := rival.lock(bg)
		require.NoError(t, err)
		time.AfterFunc(200*time.Millisecond, func() { assert.NoError(t, rival.unlock(held)) })
		wctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		start = time.Now()
		hctx, err = mine.lock(wctx)
		require.NoError(t, err)
		waited := time.Since(start)
		acq, _, _, _ = o.get()
		require.Len(t, acq, 2)
		assert.GreaterOrEqual(t, acq[1].Wait, 150*time.Millisecond)
		assert.LessOrEqual(t, acq[1].Wait, waited)

		// A hold that ends with its context is released.
		cancel()
		<-hctx.Done()
		eventually(t, time.Second, "Released for the hold that ended with its context", func() bool {
			_, rel, _, _ := o.get()
			return len(rel) == 2
		})
		time.Sleep(50 * time.Millisecond)
		acq, rel, lost, _ = o.get()
		assert.Len(t, acq, 2)
		assert.Len(t, rel, 2, "once")
		assert.Equal(t, k.nameOf(name), rel[1].Name)
		assert.Empty(t, lost, "ending with its context is no lost lease")
		assert.NoError(t, mine.unlock(hctx))
		_, rel, _, _ = o.get()
		assert.Len(t, rel, 2, "a later Unlock reports nothing more")
	})
}

// deleteAll removes every key: whatever held a lease there has lost it.
func deleteAll(t *testing.T, e *testEnv) {
	t.Helper()
	ks := e.keys(t)
	require.NotEmpty(t, ks)
	require.NoError(t, e.rdb(t).Del(context.Background(), ks...).Err())
}

// 6. LeaseLost fires when a renewal finds the hold gone, with Cause matching
// ErrLeaseLost, and the hold's context says so.
func TestAPIObserverLeaseLost(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		var o obsRecorder
		c := e.client(t, WithObserver(o.observer()), WithWatchdogTimeout(600*time.Millisecond))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		hctx, err := mine.lock(context.Background())
		require.NoError(t, err)
		// A re-entry through a context of its own, and a goroutine's
		// context derived from the hold's: they end with the loss too.
		sub, cancel := context.WithCancel(hctx)
		defer cancel()
		rctx, err := mine.lock(sub)
		require.NoError(t, err)
		gctx, gcancel := context.WithTimeout(hctx, time.Minute)
		defer gcancel()
		lag := watchLag(t)
		deleteAll(t, e)
		start := time.Now()
		select {
		case <-hctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the hold's context did not end after its key was deleted")
		}
		assert.Less(t, time.Since(start), 700*time.Millisecond+lag.Slack(),
			"found at the next renewal (every 200ms; the machine's worst delay meanwhile: %v)", lag.Worst())
		assert.ErrorIs(t, context.Cause(hctx), ErrLeaseLost)
		assert.ErrorIs(t, context.Cause(rctx), ErrLeaseLost, "the re-entry's context")
		assert.Error(t, gctx.Err(), "a context derived from the hold's")
		assert.Zero(t, mine.count(hctx))
		// The context is cancelled first, then the observer is told.
		eventually(t, time.Second, "LeaseLost", func() bool {
			_, _, lost, _ := o.get()
			return len(lost) > 0
		})
		time.Sleep(50 * time.Millisecond)
		_, rel, lost, _ := o.get()
		require.Len(t, lost, 1, "once")
		assert.ErrorIs(t, lost[0].Cause, ErrLeaseLost)
		assert.Equal(t, k.event, lost[0].Kind)
		assert.Equal(t, k.nameOf(name), lost[0].Name)
		assert.Empty(t, rel, "a lost lease is not a release")
	})
}

// 6. Renewed fires per watchdog round with the number of leases it renewed.
func TestAPIObserverRenewed(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		var o obsRecorder
		// A 900ms lease, renewed every 300ms: one of 300ms (the rounds
		// 100ms apart) was lost beside two busy loops, a round late.
		c := e.client(t, WithObserver(o.observer()), WithWatchdogTimeout(900*time.Millisecond))
		m := c.Mutex("api:renewed")
		s := c.Semaphore("api:renewed-sem")
		require.NoError(t, s.SetPermits(bg, 1))
		mctx, err := m.Lock(bg)
		require.NoError(t, err)
		sctx, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		_, _, _, before := o.get()

		time.Sleep(1650 * time.Millisecond) // rounds every 300ms
		_, _, _, ren := o.get()
		ren = ren[len(before):]
		assert.GreaterOrEqual(t, len(ren), 3)
		assert.LessOrEqual(t, len(ren), 7)
		for _, r := range ren {
			assert.Equal(t, 2, r.Holds)
			assert.GreaterOrEqual(t, r.RoundTrips, 1)
			assert.Zero(t, r.Lost)
			assert.Zero(t, r.Failed)
		}
		require.NoError(t, mctx.Err())
		require.NoError(t, sctx.Err())

		require.NoError(t, m.Unlock(mctx))
		require.NoError(t, s.Release(sctx, 1))
		time.Sleep(450 * time.Millisecond)
		_, _, _, after := o.get()
		time.Sleep(900 * time.Millisecond)
		_, _, _, later := o.get()
		assert.Equal(t, len(after), len(later), "no rounds reported without holds")
	})
}

// recHandler is a slog.Handler that records every record.
type recHandler struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func newRecHandler() recHandler { return recHandler{mu: new(sync.Mutex), recs: new([]slog.Record)} }

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r.Clone())
	return nil
}
func (h recHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recHandler) WithGroup(string) slog.Handler      { return h }

func (h recHandler) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.recs...)
}

// recordText renders a record with its attributes.
func recordText(r slog.Record) string {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.Key + "=" + a.Value.String()
		return true
	})
	return s
}

// 6. WithLogger: nothing is logged at INFO or above on the path of a
// successful Lock and Unlock; a lost lease is a WARN naming the lock.
func TestAPILogger(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		h := newRecHandler()
		c := e.client(t, WithLogger(slog.New(h)), WithWatchdogTimeout(600*time.Millisecond))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		for i := 0; i < 3; i++ {
			hctx, err := mine.lock(bg)
			require.NoError(t, err)
			rctx, err := mine.lock(hctx)
			require.NoError(t, err)
			require.NoError(t, mine.unlock(rctx))
			require.NoError(t, mine.unlock(hctx))
		}
		// Contended, across a couple of renewals.
		rival := k.rival(t, e.client(t), name)
		held, err := rival.lock(bg)
		require.NoError(t, err)
		time.AfterFunc(300*time.Millisecond, func() { assert.NoError(t, rival.unlock(held)) })
		hctx, err := mine.lock(bg)
		require.NoError(t, err)
		time.Sleep(450 * time.Millisecond)
		require.NoError(t, mine.unlock(hctx))
		for _, r := range h.records() {
			assert.Less(t, r.Level, slog.LevelInfo, "logged on a successful path: %s", recordText(r))
		}

		// A lost lease.
		hctx, err = mine.lock(bg)
		require.NoError(t, err)
		deleteAll(t, e)
		select {
		case <-hctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the lease was not found lost")
		}
		// The context is cancelled first, then the loss is logged.
		var warn []string
		named := false
		eventually(t, time.Second, "a warning about the lost lease", func() bool {
			warn = nil
			for _, r := range h.records() {
				if r.Level == slog.LevelWarn {
					warn = append(warn, recordText(r))
					named = named || strings.Contains(recordText(r), "name="+k.nameOf(name))
				}
			}
			return len(warn) > 0
		})
		assert.True(t, named, "the warning names the lock: %q", warn)
		t.Logf("%q", warn)
	})
}

// 7. CountDownLatch.Delete reports whether it was counting and releases
// every waiter, in every Client, promptly.
func TestAPILatchDelete(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c1, c2, c3 := e.client(t), e.client(t), e.client(t)
		const name = "api:latch"
		l := c3.CountDownLatch(name)

		ok, err := l.Delete(bg)
		require.NoError(t, err)
		assert.False(t, ok, "never set: not counting")

		ok, err = l.TrySetCount(bg, 5)
		require.NoError(t, err)
		require.True(t, ok)
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		type result struct {
			err error
			at  time.Time
		}
		results := make(chan result, 4)
		for _, c := range []*Client{c1, c1, c2, c2} {
			lc := c.CountDownLatch(name)
			go func() {
				err := lc.Wait(ctx)
				results <- result{err, time.Now()}
			}()
		}
		channel := "redisync_latch__channel:{" + name + "}"
		eventually(t, time.Second, "the waiters to wait", func() bool {
			return localWaiters(c1, channel) == 2 && localWaiters(c2, channel) == 2
		})
		select {
		case r := <-results:
			t.Fatalf("a waiter returned (%v) before the latch was deleted", r.err)
		case <-time.After(100 * time.Millisecond):
		}

		lag := watchLag(t)
		ok, err = l.Delete(bg)
		deleted := time.Now()
		require.NoError(t, err)
		assert.True(t, ok, "it was counting")
		for i := 0; i < 4; i++ {
			select {
			case r := <-results:
				assert.NoError(t, r.err)
				assert.Less(t, r.at.Sub(deleted), 400*time.Millisecond+lag.Slack(),
					"woken by the delete, not the 1s recheck (the machine's worst delay meanwhile: %v)", lag.Worst())
			case <-time.After(2 * time.Second):
				t.Fatal("a waiter was not released by Delete")
			}
		}
		assert.Empty(t, e.keys(t))
		n, err := l.Count(bg)
		require.NoError(t, err)
		assert.Zero(t, n)
		ok, err = l.Delete(bg)
		require.NoError(t, err)
		assert.False(t, ok, "deleted already")

		// A latch reset by Delete can count again.
		ok, err = l.TrySetCount(bg, 1)
		require.NoError(t, err)
		assert.True(t, ok)
		ok, err = l.Delete(bg)
		require.NoError(t, err)
		assert.True(t, ok)

		// A hash at the name is refused and kept.
		require.NoError(t, e.rdb(t).HSet(bg, name, "f", "v").Err())
		ok, err = l.Delete(bg)
		require.Error(t, err)
		assert.False(t, ok)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		assert.Equal(t, []string{name}, e.keys(t))
		typ, err := e.rdb(t).Type(bg, name).Result()
		require.NoError(t, err)
		assert.Equal(t, "hash", typ)
	})
}

// HoldEvent.Kind's values are fit for a metric's label: distinct, with no
// spaces; they are the ones CHANGELOG's Upgrading lists.
func TestAPIHoldEventKinds(t *testing.T) {
	want := map[Kind]string{KindMutex: "mutex", KindFairMutex: "fair_mutex", KindRWRead: "rw_read", KindRWWrite: "rw_write",
		KindSemaphore: "semaphore", KindMultiLock: "multilock", KindElection: "election"}
	assert.Len(t, want, 7, "two kinds share a value")
	for k, v := range want {
		assert.Equal(t, v, string(k))
		assert.NotContains(t, string(k), " ")
	}
}
