package redisync

// Tests for the failure scenarios of the review (S1..S12). Each shows one
// scenario end to end through the public API, with separate Clients standing
// for separate processes, and asserts the behaviour the contract asks for.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultLock is one primitive (or one mode of one) seen as a plain lock, so a
// scenario can be run on each: lock takes or re-enters a hold with ctx.
type faultLock struct {
	name   string
	lock   func(c *Client, key string, ctx context.Context, opts ...anyOpt) (context.Context, error)
	unlock func(c *Client, key string, ctx context.Context) error
	// try is another owner's TryLock, which any hold excludes; untry
	// releases what it took.
	try    func(c *Client, key string, ctx context.Context) (context.Context, error)
	untry  func(c *Client, key string, ctx context.Context) error
	force  func(c *Client, key string) error
	locked func(c *Client, key string) (bool, error)
}

var faultLocks = []faultLock{
	{
		name: "Mutex",
		lock: func(c *Client, k string, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.Mutex(k, as[MutexOption](opts)...).Lock(ctx)
		},
		try: func(c *Client, k string, ctx context.Context) (context.Context, error) {
			return c.Mutex(k).TryLock(ctx)
		},
		untry:  func(c *Client, k string, ctx context.Context) error { return c.Mutex(k).Unlock(ctx) },
		unlock: func(c *Client, k string, ctx context.Context) error { return c.Mutex(k).Unlock(ctx) },
		force: func(c *Client, k string) error {
			_, err := c.Mutex(k).ForceUnlock(context.Background())
			return err
		},
		locked: func(c *Client, k string) (bool, error) { return c.Mutex(k).IsLocked(context.Background()) },
	},
	{
		name: "FairMutex",
		lock: func(c *Client, k string, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.FairMutex(k, as[FairOption](opts)...).Lock(ctx)
		},
		try: func(c *Client, k string, ctx context.Context) (context.Context, error) {
			return c.FairMutex(k).TryLock(ctx)
		},
		untry:  func(c *Client, k string, ctx context.Context) error { return c.FairMutex(k).Unlock(ctx) },
		unlock: func(c *Client, k string, ctx context.Context) error { return c.FairMutex(k).Unlock(ctx) },
		force: func(c *Client, k string) error {
			_, err := c.FairMutex(k).ForceUnlock(context.Background())
			return err
		},
		locked: func(c *Client, k string) (bool, error) { return c.FairMutex(k).IsLocked(context.Background()) },
	},
	{
		// The read lock; other owners' tries take the write lock, which any
		// read hold excludes.
		name: "RWMutex-read",
		lock: func(c *Client, k string, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.RWMutex(k, as[RWOption](opts)...).RLock(ctx)
		},
		try: func(c *Client, k string, ctx context.Context) (context.Context, error) {
			return c.RWMutex(k).TryLock(ctx)
		},
		untry:  func(c *Client, k string, ctx context.Context) error { return c.RWMutex(k).Unlock(ctx) },
		unlock: func(c *Client, k string, ctx context.Context) error { return c.RWMutex(k).RUnlock(ctx) },
		force: func(c *Client, k string) error {
			_, err := c.RWMutex(k).ForceUnlock(context.Background())
			return err
		},
		locked: func(c *Client, k string) (bool, error) { return c.RWMutex(k).IsLocked(context.Background()) },
	},
	{
		name: "RWMutex-write",
		lock: func(c *Client, k string, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.RWMutex(k, as[RWOption](opts)...).Lock(ctx)
		},
		try: func(c *Client, k string, ctx context.Context) (context.Context, error) {
			return c.RWMutex(k).TryLock(ctx)
		},
		untry:  func(c *Client, k string, ctx context.Context) error { return c.RWMutex(k).Unlock(ctx) },
		unlock: func(c *Client, k string, ctx context.Context) error { return c.RWMutex(k).Unlock(ctx) },
		force: func(c *Client, k string) error {
			_, err := c.RWMutex(k).ForceUnlock(context.Background())
			return err
		},
		locked: func(c *Client, k string) (bool, error) { return c.RWMutex(k).IsLocked(context.Background()) },
	},
}

// excludesWhileLive polls try for d and fails the test if it succeeds while
// hctx, the holder's context, is live: while a hold's context is live no
// other owner may acquire. try reports success and undoes it.
func excludesWhileLive(t *testing.T, d time.Duration, hctx context.Context, try func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if try() {
			if hctx.Err() == nil {
				t.Errorf("another owner acquired after %v while the holder's context was live",
					d-time.Until(deadline))
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doneBy fails the test unless ctx is done by the time until, with a cause
// matching want.
func doneBy(t *testing.T, until time.Time, what string, ctx context.Context, want error) {
	t.Helper()
	select {
	case <-ctx.Done():
		assert.ErrorIs(t, context.Cause(ctx), want, "cause of %s", what)
	case <-time.After(time.Until(until)):
		t.Errorf("%s still live when it should have ended", what)
	}
}

// S3 (lease mixing): a re-entry through a handle whose lease differs from the
// hold's (outer hold with the watchdog lease, nested one through a handle
// WithLease(200ms)) re-entered and rewrote the hold's lease in Redis to
// 200ms, while the hold's context (and watchdog renewal every 10s) went on
// as before: the lock came free in Redis after 200ms and another owner took
// it while the holder's context was live. Fixed: the re-entry is refused with
// ErrInvalid and changes nothing.
func TestLeaseMixingRefused(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	for _, l := range []faultLock{faultLocks[0], faultLocks[1], faultLocks[2]} {
		t.Run(l.name, func(t *testing.T) {
			forEachEnv(t, func(t *testing.T, e *testEnv) {
				bg := context.Background()
				const key = "mixed"
				c := e.client(t) // watchdog lease: 30s
				hctx, err := l.lock(c, key, bg)
				require.NoError(t, err)

				_, err = l.lock(c, key, hctx, WithLease(200*time.Millisecond))
				assert.ErrorIs(t, err, ErrInvalid, "re-entry through a handle with another lease")
				if err == nil {
					t.Log("the re-entry was granted")
				}
				pttl, err := e.rdb(t).PTTL(bg, key).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, 25*time.Second, "the lock's lease in Redis is still the watchdog's")

				other := e.client(t)
				excludesWhileLive(t, 600*time.Millisecond, hctx, func() bool {
					octx, err := l.try(other, key, bg)
					if err != nil {
						return false
					}
					_ = l.untry(other, key, octx)
					return true
				})
				assert.NoError(t, hctx.Err(), "the holder's context")

				// A re-entry through another handle with the same lease
				// still re-enters.
				rctx, err := l.lock(c, key, hctx)
				if assert.NoError(t, err, "re-entry through another handle with the same lease") {
					assert.NoError(t, l.unlock(c, key, rctx))
				}
			})
		})
	}
	t.Run("Semaphore", func(t *testing.T) {
		forEachEnv(t, func(t *testing.T, e *testEnv) {
			bg := context.Background()
			const key = "mixed-sem"
			c := e.client(t)
			s := c.Semaphore(key)
			require.NoError(t, s.SetPermits(bg, 2))
			hctx, err := s.Acquire(bg, 1)
			require.NoError(t, err)

			_, err = c.Semaphore(key, WithLease(200*time.Millisecond)).Acquire(hctx, 1)
			assert.ErrorIs(t, err, ErrInvalid, "acquire through a handle with another lease")
			n, err := s.Available(bg)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "the refused acquire took nothing")

			// The holder holds at least one permit while its context is
			// live, so nobody else can take both.
			other := e.client(t).Semaphore(key)
			excludesWhileLive(t, 600*time.Millisecond, hctx, func() bool {
				octx, err := other.TryAcquire(bg, 2)
				if err != nil {
					return false
				}
				_ = other.Release(octx, 2)
				return true
			})
			assert.NoError(t, hctx.Err(), "the holder's context")
		})
	})
}

// S4 (re-entry after lost state): holder H (Client A) holds L; another
// process (Client B) force-unlocks L or deletes its key, then locks and
// unlocks it. H's process has not noticed (its next renewal is 10s away) and
// its re-entry was granted on the free lock: H "re-entered" a lock it had
// lost, with a count of 2 in a fresh hold, and its context stayed live.
// Fixed: the re-entry fails with ErrLeaseLost, the hold's context ends with
// ErrLeaseLost and L is left free.
func TestReentryAfterLostStateIsRefused(t *testing.T) {
	for _, l := range faultLocks {
		for _, how := range []string{"ForceUnlock", "DEL"} {
			t.Run(l.name+"/"+how, func(t *testing.T) {
				forEachEnv(t, func(t *testing.T, e *testEnv) {
					bg := context.Background()
					const key = "lost"
					a, b := e.client(t), e.client(t)
					hctx, err := l.lock(a, key, bg)
					require.NoError(t, err)

					if how == "DEL" {
						require.NoError(t, e.rdb(t).Del(bg, key).Err())
					} else {
						require.NoError(t, l.force(b, key))
					}
					bctx, err := l.lock(b, key, bg)
					require.NoError(t, err, "B's owner locks the lost lock")
					require.NoError(t, l.unlock(b, key, bctx))

					_, reErr := l.lock(a, key, hctx)
					assert.ErrorIs(t, reErr, ErrLeaseLost, "re-entry of a lost hold")
					assert.Error(t, hctx.Err(), "the hold's context has ended when the re-entry returns")
					doneBy(t, time.Now().Add(500*time.Millisecond), "the hold's context", hctx, ErrLeaseLost)
					locked, err := l.locked(b, key)
					require.NoError(t, err)
					assert.False(t, locked, "the lock is left free")
					assert.Empty(t, e.keys(t))
				})
			})
		}
	}
}

// S7 (queued-waiter shortcut sleeps on a free lock): a Lock that finds a
// local waiter already queued skips its first try and waits lease/3 (10s
// with the default watchdog timeout) for a wake-up. When that waiter then
// leaves (its context cancelled) and the holder's lease simply runs out (a
// crashed holder: no unlock message), nobody wakes the new caller: it slept
// ~10s on a free lock. Fixed: it acquires soon after the holder's lease ends.
func TestQueuedWaiterShortcutDoesNotSleepOnFreeLock(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		// The scenario needs its setup (two waiters queued, the first
		// gone) done while the holder's lease runs: on a machine too busy
		// for that, it runs again with a longer lease.
		for i, lease := range []time.Duration{1200 * time.Millisecond, 3 * time.Second, 8 * time.Second} {
			if queuedWaiterShortcut(t, e, fmt.Sprintf("shortcut%d", i), lease) {
				return
			}
			t.Logf("the setup outlasted a %v lease: again with a longer one", lease)
		}
		t.Fatal("the setup outlasted every lease")
	})
}

// queuedWaiterShortcut runs TestQueuedWaiterShortcutDoesNotSleepOnFreeLock
// with a holder's lease of lease, and reports whether its setup was done
// in time for the scenario.
func queuedWaiterShortcut(t *testing.T, e *testEnv, key string, lease time.Duration) bool {
	bg := context.Background()
	rdbA := e.rdb(t)
	a := newClient(t, rdbA)
	start := time.Now()
	_, err := a.Mutex(key, WithLease(lease)).Lock(bg)
	require.NoError(t, err)
	// The holder crashes: its lease runs out in Redis, with no unlock
	// message (its own give-back, once told at its deadline, would wake
	// W2 and hide the sleep).
	require.NoError(t, rdbA.Close())

	b := e.client(t) // default watchdog timeout: lease/3 = 10s
	m := b.Mutex(key)
	channel := "redisson_lock__channel:{" + key + "}"
	w1ctx, cancelW1 := context.WithCancel(bg)
	defer cancelW1()
	w1 := make(chan error, 1)
	go func() {
		ctx, err := m.Lock(w1ctx)
		if err == nil {
			_ = m.Unlock(ctx)
		}
		w1 <- err
	}()
	eventually(t, 5*time.Second, "W1 waiting", func() bool { return localWaiters(b, channel) == 1 })

	// W2's bound: past the holder's lease, short of the 10s W2 slept on
	// the free lock before the fix.
	w2ctx, cancelW2 := context.WithTimeout(bg, lease+2800*time.Millisecond)
	defer cancelW2()
	type result struct {
		ctx context.Context
		err error
		at  time.Duration
	}
	w2 := make(chan result, 1)
	go func() {
		ctx, err := m.Lock(w2ctx)
		w2 <- result{ctx, err, time.Since(start)}
	}()
	eventually(t, 5*time.Second, "W2 waiting", func() bool { return localWaiters(b, channel) == 2 })
	cancelW1()
	w1err := <-w1
	if time.Since(start) > lease-200*time.Millisecond {
		cancelW2()
		if r := <-w2; r.err == nil {
			require.NoError(t, m.Unlock(r.ctx))
		}
		return false // W1 may have seen the lock free, or W2 with it
	}
	require.ErrorIs(t, w1err, context.Canceled)
	lag := watchLag(t)

	if e.mr != nil {
		// miniredis expires keys only on its own clock.
		time.Sleep(time.Until(start.Add(lease)))
		e.mr.FastForward(lease)
	}
	r := <-w2
	lag.Stop()
	require.NoError(t, r.err, "W2's Lock (bounded at %v) after %v", lease+2800*time.Millisecond, r.at)
	t.Logf("W2 acquired %v after the holder locked (lease %v; the machine's worst delay meanwhile: %v)", r.at, lease, lag.Worst())
	assert.Less(t, r.at, lease+700*time.Millisecond+lag.Slack(), "W2 acquires soon after the holder's lease ends")
	assert.NoError(t, m.Unlock(r.ctx))
	return true
}

// S10 (fractional-millisecond leases): WithLease(1900µs) sent Redis a lease
// of 1ms (truncated) while the hold's local deadline counted 1.9ms (less a
// margin): another owner took the lock while the holder's context was live.
// Fixed: a lease is rounded up to whole milliseconds, the same for Redis and
// the local deadline; the deadline also allows for Redis's millisecond clock
// (a PEXPIRE of n ms may expire after n-1 ms) and for timer latency, and
// leases too short for that (below MinLease) are refused.
//
// The check is the promise itself: the moment another owner's TryLock
// succeeds, the holder's context is already done. (Real server only:
// miniredis does not expire keys on the wall clock.)
func TestFractionalMillisecondLease(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	a, b := e.client(t), e.client(t)

	_, err := a.Mutex("frac-tiny", WithLease(1900*time.Microsecond)).Lock(bg)
	require.ErrorIs(t, err, ErrInvalid, "a lease below MinLease is refused")
	require.Empty(t, e.keys(t))

	const trials = 20
	const lease = 50900 * time.Microsecond // Redis got 50ms before the fix
	live := 0
	for i := range trials {
		key := fmt.Sprintf("frac-%d", i)
		start := time.Now()
		hctx, err := a.Mutex(key, WithLease(lease)).Lock(bg)
		require.NoError(t, err)
		contender := b.Mutex(key)
		deadline := time.Now().Add(time.Second)
		for {
			octx, err := contender.TryLock(bg)
			if err == nil {
				// Checked at once, in the contender's goroutine.
				if hctx.Err() == nil {
					live++
					t.Logf("trial %d: another owner acquired %v after the holder began Lock, its context still live", i, time.Since(start))
				}
				require.NoError(t, contender.Unlock(octx))
				break
			}
			require.ErrorIs(t, err, ErrNotAcquired)
			require.True(t, time.Now().Before(deadline), "trial %d: the lease never ran out", i)
		}
	}
	assert.Zero(t, live, "trials in which another owner acquired while the holder's context was live")
}

// S11 (every context handed out for a hold ends when it is lost): a re-entry
// with a context that carries the hold but not lctx's cancellation
// (context.WithoutCancel(lctx), e.g. handed to a goroutine that outlives a
// request) got that context back as its hold's context; when the hold was
// lost only lctx was cancelled, and the re-entrant holder went on believing
// it held the lock. Fixed: both end, with cause ErrLeaseLost.
func TestEveryHoldContextEndsWhenLost(t *testing.T) {
	for _, l := range faultLocks {
		for _, how := range []string{"DEL", "ForceUnlock"} {
			if how == "DEL" && l.name != "Mutex" {
				continue
			}
			t.Run(l.name+"/"+how, func(t *testing.T) {
				forEachEnv(t, func(t *testing.T, e *testEnv) {
					bg := context.Background()
					const key = "shared-hold"
					c := e.client(t, WithWatchdogTimeout(600*time.Millisecond)) // renewed every 200ms
					lctx, err := l.lock(c, key, bg)
					require.NoError(t, err)

					got := make(chan context.Context, 1)
					go func() {
						ctx2, err := l.lock(c, key, context.WithoutCancel(lctx))
						assert.NoError(t, err, "re-entry with a context carrying the hold")
						got <- ctx2
					}()
					var ctx2 context.Context
					select {
					case ctx2 = <-got:
					case <-time.After(2 * time.Second):
						t.Fatal("re-entry blocked")
					}
					require.NoError(t, ctx2.Err())

					if how == "DEL" {
						require.NoError(t, e.rdb(t).Del(bg, key).Err())
					} else {
						require.NoError(t, l.force(c, key))
					}
					// The watchdog finds a deleted key at its next renewal
					// (every 200ms) and tells the holder within 540ms.
					until := time.Now().Add(time.Second)
					doneBy(t, until, "lctx", lctx, ErrLeaseLost)
					doneBy(t, until, "ctx2 (the re-entry's context)", ctx2, ErrLeaseLost)
				})
			})
		}
	}
}

// S12 (Semaphore permit stranded by a Redis stall): Client 1 holds the only
// permit, Client 2 waits in Acquire, and Redis stalls for longer than the
// lease. Acquire scripts sent during the stall run when Redis resumes;
// a permit they grant must not be kept in Redis for an owner whose process
// no longer holds it (its Acquire failed, or its context is already done):
// within ~1.5s of the resume the system is consistent. (Real server only.)
func TestSemaphoreStallDoesNotStrandPermit(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	const key = "stall"
	const lease, stall = 1500 * time.Millisecond, 2500 * time.Millisecond
	c1 := e.client(t, WithWatchdogTimeout(lease))
	c2 := e.client(t, WithWatchdogTimeout(lease))
	s1, s2 := c1.Semaphore(key), c2.Semaphore(key)
	require.NoError(t, s1.SetPermits(bg, 1))
	h1, err := s1.Acquire(bg, 1)
	require.NoError(t, err)

	type result struct {
		ctx context.Context
		err error
		at  time.Time
	}
	acquired := make(chan result, 1)
	actx, cancelAcquire := context.WithTimeout(bg, 15*time.Second)
	defer cancelAcquire()
	go func() {
		ctx, err := s2.Acquire(actx, 1)
		acquired <- result{ctx, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // Client 2 waits

	e.srv.Pause()
	paused := time.Now()
	t.Logf("redis paused for %v (the lease is %v)", stall, lease)
	time.Sleep(stall)
	e.srv.Resume()
	resumed := time.Now()
	t.Log("redis resumed")

	assert.Error(t, h1.Err(), "Client 1's context ends: its lease could not be renewed during the stall")
	t.Logf("Client 1's context: %v (cause %v)", h1.Err(), context.Cause(h1))

	// Client 2's Acquire ends one way or the other (it may first have to
	// get through go-redis's retries of the scripts sent during the stall).
	var r result
	select {
	case r = <-acquired:
	case <-time.After(8 * time.Second):
		t.Fatal("Client 2's Acquire still waiting 8s after the resume")
	}
	t.Logf("Client 2's Acquire returned %v after the pause began (the pause lasted %v): err=%v",
		r.at.Sub(paused), resumed.Sub(paused), r.err)

	check := s1 // reads through Client 1's connection pool
	availableSoon := func(want int, what string) {
		t.Helper()
		var n int
		deadline := resumed.Add(1500 * time.Millisecond)
		if r.at.After(resumed) {
			deadline = r.at.Add(1500 * time.Millisecond)
		}
		for {
			var err error
			n, err = check.Available(bg)
			if err == nil && n == want {
				t.Logf("Available = %d %v after the resume", n, time.Since(resumed))
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: Available = %d (err %v) %v after the resume, want %d", what, n, err, time.Since(resumed), want)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	switch {
	case r.err != nil:
		t.Logf("Client 2's Acquire failed: %v", r.err)
		availableSoon(1, "Client 2's Acquire failed, so Redis must not keep a permit for it")
	case r.ctx.Err() != nil:
		t.Logf("Client 2 acquired, but its hold is already lost: %v", context.Cause(r.ctx))
		assert.ErrorIs(t, context.Cause(r.ctx), ErrLeaseLost)
		availableSoon(1, "Client 2's hold is lost, so Redis must not keep its permit")
		err := s2.Release(r.ctx, 1)
		t.Logf("Release with Client 2's lost hold: %v", err)
		if err != nil {
			assert.ErrorIs(t, err, ErrNotHeld)
		}
		availableSoon(1, "after the release")
	default:
		t.Log("Client 2 acquired and holds the permit")
		n, err := check.Available(bg)
		require.NoError(t, err)
		if r.ctx.Err() == nil {
			assert.Equal(t, 0, n, "Client 2's live hold has the permit")
		}
		// Its attempt may have sat in the paused server's socket: its
		// lease, counted from the sending, then has little left when the
		// grant comes, and the renewal sent at once (lease.Keeper.Add) may
		// come too late on a loaded machine. The hold is then lost, not
		// kept, and its release says so.
		if err := s2.Release(r.ctx, 1); err != nil {
			t.Logf("Release: %v", err)
			assert.ErrorIs(t, err, ErrLeaseLost)
			assert.ErrorIs(t, context.Cause(r.ctx), ErrLeaseLost, "a hold whose release says lost has ended as lost")
		}
		availableSoon(1, "after Client 2's release")
	}
}

// S1 (x and {x} share companion keys): the companion keys of a lock named
// x and of one named {x} were the same ({x}:rw:readers, {x}:fair:queue,
// {x}:holders, ...), so two different locks disturbed each other.
func TestBracedAndPlainNamesAreDifferentLocks(t *testing.T) {
	// (a) A script on the free RWMutex "acct" found its own hash missing
	// and deleted the read holders of "{acct}", so a writer then took
	// "{acct}" while a reader held it.
	t.Run("RWMutex", func(t *testing.T) {
		forEachEnv(t, func(t *testing.T, e *testEnv) {
			bg := context.Background()
			a, b, w := e.client(t), e.client(t), e.client(t)
			rctx, err := a.RWMutex("{acct}").RLock(bg)
			require.NoError(t, err)

			plain := b.RWMutex("acct")
			pctx, err := plain.RLock(bg)
			require.NoError(t, err, "the free lock acct")
			require.NoError(t, plain.RUnlock(pctx))

			wctx, err := w.RWMutex("{acct}").TryLock(bg)
			assert.ErrorIs(t, err, ErrNotAcquired, "a writer while a reader holds {acct}")
			if err == nil {
				require.NoError(t, w.RWMutex("{acct}").Unlock(wctx))
			}
			assert.NoError(t, rctx.Err(), "the reader's context")
			n, err := rwReaders(bg, a.RWMutex("{acct}"))
			require.NoError(t, err)
			assert.Equal(t, 1, n, "readers of {acct}")

			assert.NoError(t, a.RWMutex("{acct}").RUnlock(rctx))
			assert.Empty(t, e.keys(t), "nothing left once every hold is released")
		})
	})

	// (b) The two semaphores shared their holders and expiry keys: "pool"
	// counted "{pool}"'s holder as its own, and a script on "{pool}"
	// reclaimed the expired permit of a "pool" holder as if it were its
	// own, granting "{pool}"'s only permit to a second owner.
	t.Run("Semaphore", func(t *testing.T) {
		forEachEnv(t, func(t *testing.T, e *testEnv) {
			bg := context.Background()
			a, b, c := e.client(t), e.client(t), e.client(t)
			braced := a.Semaphore("{pool}")
			require.NoError(t, braced.SetPermits(bg, 1))
			actx, err := braced.Acquire(bg, 1)
			require.NoError(t, err)

			plain := c.Semaphore("pool")
			require.NoError(t, plain.SetPermits(bg, 2))
			n, err := plain.Available(bg)
			require.NoError(t, err)
			assert.Equal(t, 2, n, "pool's permits are its own")
			pctx, err := plain.Acquire(bg, 1)
			require.NoError(t, err)
			require.NoError(t, plain.Release(pctx, 1))
			// A holder of "pool" whose lease runs out (a crash).
			short := c.Semaphore("pool", WithLease(100*time.Millisecond))
			sctx, err := short.Acquire(bg, 1)
			require.NoError(t, err)
			select {
			case <-sctx.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("the 100ms lease's context did not end")
			}
			time.Sleep(50 * time.Millisecond) // past the lease in Redis too

			bctx, err := b.Semaphore("{pool}").TryAcquire(bg, 1)
			assert.ErrorIs(t, err, ErrNotAcquired, "{pool}'s only permit is held by A")
			if err == nil {
				t.Log("{pool}'s only permit granted to a second owner")
				require.NoError(t, b.Semaphore("{pool}").Release(bctx, 1))
			}
			assert.NoError(t, actx.Err(), "A's context")
			n, err = plain.Available(bg)
			require.NoError(t, err)
			assert.Equal(t, 2, n, "pool's permits once its holders are gone")

			require.NoError(t, braced.Release(actx, 1))
			assert.ElementsMatch(t, []string{"pool", "{pool}"}, e.keys(t),
				"only the totals are left once every permit is released")
		})
	})

	// (c) The free FairMutex "job" found "{job}"'s waiter at the head of
	// what it took for its own queue: a TryLock was refused and a Lock
	// queued behind a waiter of another lock.
	t.Run("FairMutex", func(t *testing.T) {
		forEachEnv(t, func(t *testing.T, e *testEnv) {
			bg := context.Background()
			x, y, z := e.client(t), e.client(t), e.client(t)
			xctx, err := x.FairMutex("{job}").Lock(bg)
			require.NoError(t, err)
			yctx, cancelY := context.WithTimeout(bg, 10*time.Second)
			defer cancelY()
			yres := make(chan error, 1)
			go func() {
				ctx, err := y.FairMutex("{job}").Lock(yctx)
				if err == nil {
					err = y.FairMutex("{job}").Unlock(ctx)
				}
				yres <- err
			}()
			eventually(t, 2*time.Second, "Y queued for {job}", func() bool { return len(e.keys(t)) > 1 })

			plain := z.FairMutex("job")
			zctx, err := plain.TryLock(bg)
			if assert.NoError(t, err, "TryLock of the free lock job") {
				require.NoError(t, plain.Unlock(zctx))
			}
			lctx, cancelL := context.WithTimeout(bg, 5*time.Second)
			defer cancelL()
			lag := watchLag(t)
			start := time.Now()
			zctx, err = plain.Lock(lctx)
			if assert.NoError(t, err, "Lock of the free lock job") {
				assert.Less(t, time.Since(start), 500*time.Millisecond+lag.Slack(), "granted at once (the machine's worst delay meanwhile: %v)", lag.Worst())
				require.NoError(t, plain.Unlock(zctx))
			}
			assert.NoError(t, xctx.Err(), "X's hold of {job}")

			require.NoError(t, x.FairMutex("{job}").Unlock(xctx))
			select {
			case err := <-yres:
				require.NoError(t, err, "Y gets {job} after X")
			case <-time.After(5 * time.Second):
				t.Fatal("Y did not get {job} after X's unlock")
			}
			eventually(t, 2*time.Second, "no key left", func() bool { return len(e.keys(t)) == 0 })
		})
	})
}
