package redisync

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Promises every primitive makes, each written once and run on every
// primitive (apiKinds: mine is how a test holds it, rival a way that
// excludes mine), against miniredis and a real redis-server. The
// combinations with options, topologies and faults are in internal/matrix.

// Exclusion under contention: clients' goroutines hammer the lock, mine
// and rival ways mixed; the units held at once never exceed the lock's
// capacity, a counter only exclusive holds touch (not atomic) counts every
// one of them, re-entries inside the hold work, shared holds (readers,
// permits) do overlap, and nothing is left behind.
func TestExclusionUnderContention(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		clients := []*Client{e.client(t), e.client(t), e.client(t)}
		k.setup(t, clients[0], name)
		base := redisState(t, e)
		var inUse, mineIn, peakMine, exclusive atomic.Int64
		var violations atomic.Int32
		counter := 0 // deliberately not atomic: exclusive holds protect it
		const goroutines, rounds = 12, 10
		var wg sync.WaitGroup
		for g := range goroutines {
			c := clients[g%len(clients)]
			ops, units, isMine := k.mine(t, c, name), k.mineUnits, true
			if g%3 == 2 {
				ops, units, isMine = k.rival(t, c, name), k.rivalUnits, false
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					ctx, cancel := context.WithTimeout(bg, 20*time.Second)
					hctx, err := ops.lock(ctx)
					if !assert.NoError(t, err) {
						cancel()
						return
					}
					if inUse.Add(int64(units)) > int64(k.capacity) {
						violations.Add(1)
					}
					if isMine {
						n := mineIn.Add(1)
						for p := peakMine.Load(); n > p && !peakMine.CompareAndSwap(p, n); p = peakMine.Load() {
						}
					}
					if units == k.capacity {
						v := counter
						time.Sleep(100 * time.Microsecond)
						counter = v + 1
						exclusive.Add(1)
					} else {
						time.Sleep(time.Millisecond)
					}
					// A re-entry inside the hold (not the Semaphore's, which
					// would take more permits).
					if k.name != "Semaphore" {
						rctx, err := ops.lock(hctx)
						if assert.NoError(t, err) {
							assert.NoError(t, ops.unlock(rctx))
						}
					}
					assert.NoError(t, hctx.Err(), "hold lost while working")
					if isMine {
						mineIn.Add(-1)
					}
					inUse.Add(-int64(units))
					assert.NoError(t, ops.unlock(hctx))
					cancel()
				}
			}()
		}
		wg.Wait()
		assert.Zero(t, violations.Load(), "more units held at once than the lock has")
		assert.EqualValues(t, exclusive.Load(), counter, "an exclusive hold overlapped another")
		if k.shared() {
			assert.Greater(t, peakMine.Load(), int64(1), "shared holds never overlapped")
		}
		assert.Equal(t, base, redisState(t, e), "nothing left behind")
	})
}

// The seeds' failure mode 3: a holder that crashes (no renewal, no
// release) loses its lock within one lease, by Redis's clock: a waiter in
// another process gets it then, not before the lease could have run out,
// and the crashed side's hold is marked lost too.
func TestFailureModeCrashedHolderFreesLock(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		if e.mr != nil {
			realTimeTTL(t, e.mr) // leases run out in real time
		}
		const lease = 600 * time.Millisecond
		bg := context.Background()
		cw := e.client(t, WithWatchdogTimeout(lease))
		k.setup(t, cw, name)
		base := redisState(t, e)
		crashed, crash := crashableRDB(t, e.addr)
		hctx, err := k.mine(t, newClient(t, crashed, WithWatchdogTimeout(lease)), name).lock(bg)
		require.NoError(t, err)
		waiter := k.rival(t, cw, name)
		wctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		got := lockAsync(wctx, waiter.lock)
		eventually(t, 2*time.Second, "the waiter waiting", func() bool { return semWaiters(cw) == 1 })

		lag := watchLag(t)
		crash() // the process is gone
		crashedAt := time.Now()
		r := recvLock(t, got, 3*time.Second, "the waiter")
		require.NoError(t, r.err)
		waited := r.at.Sub(crashedAt)
		t.Logf("crashed holder's lock taken over after %v (lease %v)", waited, lease)
		assert.Less(t, waited, lease+800*time.Millisecond+lag.Slack(), "freed within one lease (the machine's worst delay meanwhile: %v)", lag.Worst())
		assert.Greater(t, waited, lease/3, "freed before the lease could have run out")
		select {
		case <-hctx.Done():
		default:
			t.Fatal("the crashed holder's context is still live after another owner took the lock")
		}
		assert.ErrorIs(t, context.Cause(hctx), ErrLeaseLost, "the crashed side's hold is marked lost too")
		require.NoError(t, waiter.unlock(r.ctx))
		assert.Equal(t, base, redisState(t, e))
	})
}

// Close ends the Client's waits with ErrClosed and its holds (every
// context of them: re-entries, a pending downgrade) with a cause matching
// ErrClosed and ErrLeaseLost, releases them in Redis so that another
// Client's waiter gets the lock at once, and refuses later calls.
func TestCloseEndsWaitsAndReleases(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c, c2 := e.client(t), e.client(t)
		k.setup(t, c2, name)
		base := redisState(t, e)
		mine := k.mine(t, c, name)
		hctx, err := mine.lock(bg)
		require.NoError(t, err)
		ends := []context.Context{hctx}
		if k.name != "Semaphore" { // its re-entry would take another permit
			rctx, err := mine.lock(hctx)
			require.NoError(t, err)
			ends = append(ends, rctx)
		}
		if k.name == "RWMutexWrite" { // a downgrade pending
			dctx, err := c.RWMutex(name).RLock(hctx)
			require.NoError(t, err)
			ends = append(ends, dctx)
		}
		local := lockAsync(bg, k.rival(t, c, name).lock)
		eventually(t, 2*time.Second, "the closing client's waiter waiting", func() bool { return semWaiters(c) == 1 })
		other := k.rival(t, c2, name)
		remote := lockAsync(bg, other.lock)
		eventually(t, 2*time.Second, "the other client's waiter waiting", func() bool { return semWaiters(c2) == 1 })

		require.NoError(t, c.Close())
		assert.ErrorIs(t, recvLock(t, local, time.Second, "the closed client's waiter").err, ErrClosed)
		for _, ctx := range ends {
			assert.ErrorIs(t, context.Cause(ctx), ErrClosed)
			assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
		}
		r := recvLock(t, remote, time.Second, "the other client's waiter")
		require.NoError(t, r.err)
		require.NoError(t, other.unlock(r.ctx))
		assert.Equal(t, base, redisState(t, e), "the closed client's holds were released, its waits left nothing")
		_, err = mine.lock(bg)
		assert.ErrorIs(t, err, ErrClosed)
	})
}

// ForceUnlock frees the lock whoever holds it and wakes a waiter; holders
// in the process that forced it are told at once, holders elsewhere at
// their next renewal (their last Unlock then finds their field gone, which
// they cannot tell from their own unlock resent after it succeeded: it
// reports success); an Unlock through a hold this process knows was lost
// says so; it reports whether it freed anything, and refuses a key of
// another type.
func TestForceUnlock(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		if k.force == nil {
			t.Skipf("%s has no ForceUnlock", k.name)
		}
		bg := context.Background()
		c1, c2, c3 := e.client(t), e.client(t), e.client(t)
		k.setup(t, c1, name)
		base := redisState(t, e)
		mine := k.mine(t, c1, name)
		hctx, err := mine.lock(bg)
		require.NoError(t, err)
		waiter := k.rival(t, c2, name)
		got := lockAsync(bg, waiter.lock)
		eventually(t, 2*time.Second, "the waiter waiting", func() bool { return semWaiters(c2) == 1 })

		ok, err := k.force(c3, name)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.Zero(t, mine.count(hctx), "the hold count is Redis's: none left")
		r := recvLock(t, got, time.Second, "the waiter, woken by ForceUnlock")
		require.NoError(t, r.err)

		ok, err = k.force(c1, name)
		require.NoError(t, err)
		assert.True(t, ok, "the waiter's hold is freed")
		assert.ErrorIs(t, context.Cause(hctx), ErrLeaseLost, "the process that forced it: told at once")
		assert.NoError(t, r.ctx.Err(), "another process hears at its next renewal")
		assert.ErrorIs(t, waiter.unlock(r.ctx), ErrLeaseLost, "or at its Unlock")
		assert.Error(t, r.ctx.Err())
		assert.ErrorIs(t, mine.unlock(hctx), ErrLeaseLost, "a hold this process knows was lost")

		ok, err = k.force(c1, name)
		require.NoError(t, err)
		assert.False(t, ok, "nothing to free")
		assert.Equal(t, base, redisState(t, e))

		require.NoError(t, e.rdb(t).Set(bg, name, "x", 0).Err())
		_, err = k.force(c1, name)
		require.Error(t, err, "a key of another type is refused")
		assert.True(t, strings.Contains(err.Error(), "WRONGTYPE"), "%v", err)
		assert.False(t, errors.Is(err, ErrInvalid))
	})
}

// Waiters whose subscription connection is killed (CLIENT KILL TYPE
// pubsub) are subscribed again and woken by the next release, which is
// very likely published while nobody listens: promptly, well within the
// holder's lease (30s) and the Semaphore's re-check (semWaitCap), not by
// either.
func TestWaitersSurviveKilledSubscription(t *testing.T) {
	forEachRealKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		k.setup(t, c1, name)
		holder := k.rival(t, c1, name)
		hctx, err := holder.lock(bg)
		require.NoError(t, err)
		const waiters = 3
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		got := make(chan lockResult, waiters)
		for range waiters {
			go func() {
				w := k.mine(t, c2, name)
				r := <-lockAsync(ctx, w.lock)
				if r.err == nil {
					time.Sleep(10 * time.Millisecond)
					r.err = w.unlock(r.ctx)
				}
				got <- r
			}()
		}
		eventually(t, 2*time.Second, "the waiters subscribed", func() bool {
			n := 0
			for _, ch := range c2.ps.Channels() {
				if !ch.Subscribed {
					return false
				}
				n += ch.Waiters
			}
			return n == waiters
		})
		n, err := e.rdb(t).ClientKillByFilter(bg, "TYPE", "pubsub").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the waiters' one subscription connection")
		lag := watchLag(t)
		released := time.Now()
		require.NoError(t, holder.unlock(hctx))
		for range waiters {
			select {
			case r := <-got:
				require.NoError(t, r.err)
				assert.Less(t, r.at.Sub(released), 1500*time.Millisecond+lag.Slack(),
					"woken by the release, not by a re-check (the machine's worst delay meanwhile: %v)", lag.Worst())
			case <-time.After(5 * time.Second):
				t.Fatal("a waiter stranded by a killed subscription")
			}
		}
	})
}
