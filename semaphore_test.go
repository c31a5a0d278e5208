package redisync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/lua"
)

// semWaiters counts the local waiters registered on c's shared subscription.
func semWaiters(c *Client) int {
	n := 0
	for _, ch := range c.ps.Channels() {
		n += ch.Waiters
	}
	return n
}

// semSubscribed reports whether c has a confirmed subscription to channel
// with at least n local waiters.
func semSubscribed(c *Client, channel string, n int) bool {
	ch, ok := c.ps.Channel(channel)
	return ok && ch.Waiters >= n && ch.Ready
}

// semState reads a semaphore's three keys as one string, to show that a
// refused call changed nothing.
func semState(t *testing.T, e *testEnv, name string) string {
	t.Helper()
	ctx := context.Background()
	rdb := e.rdb(t)
	main, err := rdb.HGetAll(ctx, name).Result()
	require.NoError(t, err)
	holders, err := rdb.HGetAll(ctx, keys.Companion(name, "sem-holders")).Result()
	require.NoError(t, err)
	expiry, err := rdb.ZRangeWithScores(ctx, keys.Companion(name, "sem-expiry"), 0, -1).Result()
	require.NoError(t, err)
	return fmt.Sprint(main, holders, expiry)
}

func available(t *testing.T, s *Semaphore) int {
	t.Helper()
	n, err := s.Available(context.Background())
	require.NoError(t, err)
	return n
}

func TestSemaphoreAcquireRelease(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		s := c.Semaphore("sem")

		ok, err := s.TrySetPermits(bg, 3)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TrySetPermits(bg, 10)
		require.NoError(t, err)
		require.False(t, ok, "permits already set")
		require.Equal(t, 3, available(t, s))

		hctx, err := s.TryAcquire(bg, 2)
		require.NoError(t, err)
		require.NotNil(t, holds.Held(hctx, s.spec.Ref))
		require.Equal(t, 1, available(t, s))
		require.Equal(t, 2, s.held(hctx))

		// The same hold acquiring more gets back the context it gave.
		type key struct{}
		vctx := context.WithValue(hctx, key{}, 1) // a derived context
		got, err := s.Acquire(vctx, 1)
		require.NoError(t, err)
		require.Equal(t, vctx, got)
		require.Equal(t, 0, available(t, s))
		require.Equal(t, 3, s.held(hctx))

		// Another owner (a context without one gets a fresh one) is refused.
		other, err := s.TryAcquire(bg, 1)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.Nil(t, other, "a nil context on error")

		// Releasing more than held is refused and changes nothing.
		before := semState(t, e, "sem")
		require.ErrorIs(t, s.Release(hctx, 4), ErrNotHeld)
		require.ErrorIs(t, s.Release(bg, 1), ErrNotHeld)
		require.ErrorIs(t, s.Release(WithOwner(bg), 1), ErrNotHeld)
		require.Equal(t, before, semState(t, e, "sem"))

		// Release in parts; the hold's context lives until the last permit.
		require.NoError(t, s.Release(hctx, 2))
		require.NoError(t, hctx.Err())
		require.Equal(t, 2, available(t, s))
		require.NoError(t, s.Release(hctx, 1))
		require.ErrorIs(t, hctx.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(hctx), context.Canceled, "plain cancel, not a lost lease")
		require.Equal(t, 3, available(t, s))
		require.ErrorIs(t, s.Release(hctx, 1), ErrNotHeld)

		// Only the total is left in Redis.
		require.Equal(t, []string{"sem"}, e.keys(t))
		v, err := e.rdb(t).HGetAll(bg, "sem").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"permits": "3"}, v)
	})
}

func TestSemaphoreOwners(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		s := e.client(t).Semaphore("sem")
		require.NoError(t, s.SetPermits(bg, 2))

		// Two acquisitions with hold-less contexts are two owners.
		a, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		b, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		require.NotEqual(t, holds.Held(a, s.spec.Ref).Field, holds.Held(b, s.spec.Ref).Field)
		require.Equal(t, 1, s.held(a))
		require.Equal(t, 1, s.held(b))

		// Release works with a cancelled context.
		cctx, cancel := context.WithCancel(a)
		cancel()
		require.NoError(t, s.Release(cctx, 1))
		require.Error(t, a.Err())
		require.NoError(t, b.Err())
		require.NoError(t, s.Release(b, 1))
		require.Equal(t, 2, available(t, s))

		// Goroutines handed a hold's context add to that hold.
		require.NoError(t, s.SetPermits(bg, 3))
		shared, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Acquire(shared, 1)
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
		require.Equal(t, 3, s.held(shared))
		require.Equal(t, 0, available(t, s))
		require.NoError(t, s.Release(shared, 3))
		require.Equal(t, 3, available(t, s))
		require.ErrorIs(t, shared.Err(), context.Canceled)
	})
}

func TestSemaphoreBadInput(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		s := c.Semaphore("sem")
		require.NoError(t, s.SetPermits(bg, 2))
		hctx, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		before := semState(t, e, "sem")
		keysBefore := e.keys(t)

		for _, bad := range []*Semaphore{
			c.Semaphore(""),
			c.Semaphore("a{}b"),
			c.Semaphore("x", WithLease(0)),
			c.Semaphore("x", nil),
			(*Client)(nil).Semaphore("x"),
		} {
			_, err := bad.TryAcquire(bg, 1)
			require.ErrorIs(t, err, ErrInvalid)
			_, err = bad.Acquire(bg, 1)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, bad.Release(hctx, 1), ErrInvalid)
			require.ErrorIs(t, bad.SetPermits(bg, 1), ErrInvalid)
			_, err = bad.TrySetPermits(bg, 1)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, bad.AddPermits(bg, 1), ErrInvalid)
			_, err = bad.Available(bg)
			require.ErrorIs(t, err, ErrInvalid)
		}
		for _, n := range []int{0, -1} {
			got, err := s.Acquire(bg, n)
			require.ErrorIs(t, err, ErrInvalid)
			require.Nil(t, got)
			_, err = s.TryAcquire(hctx, n)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, s.Release(hctx, n), ErrInvalid)
		}
		require.ErrorIs(t, s.SetPermits(bg, -1), ErrInvalid)
		_, err = s.TrySetPermits(bg, -1)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, s.AddPermits(bg, 0), ErrInvalid)
		require.ErrorIs(t, s.SetPermits(bg, maxPermits+1), ErrInvalid)
		// Below what is in use (1 held of 2).
		require.ErrorIs(t, s.AddPermits(bg, -2), ErrInvalid)
		// A semaphore never set counts as 0 permits.
		require.ErrorIs(t, c.Semaphore("fresh").AddPermits(bg, -1), ErrInvalid)

		require.Equal(t, before, semState(t, e, "sem"))
		require.Equal(t, keysBefore, e.keys(t))
		require.Equal(t, 1, s.held(hctx))
		require.NoError(t, hctx.Err())

		// A key of another type is an error, not a panic, and is kept.
		require.NoError(t, e.rdb(t).Set(bg, "str", "x", 0).Err())
		_, err = c.Semaphore("str").TryAcquire(bg, 1)
		require.ErrorContains(t, err, "WRONGTYPE")
		v, err := e.rdb(t).Get(bg, "str").Result()
		require.NoError(t, err)
		require.Equal(t, "x", v)
	})
}

func TestSemaphorePermits(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		s := e.client(t).Semaphore("sem")

		// Never set: nothing available, TryAcquire refused.
		require.Equal(t, 0, available(t, s))
		_, err := s.TryAcquire(bg, 1)
		require.ErrorIs(t, err, ErrNotAcquired)
		require.Empty(t, e.keys(t))

		// AddPermits on a semaphore never set starts from 0.
		require.NoError(t, s.AddPermits(bg, 2))
		require.Equal(t, 2, available(t, s))
		ok, err := s.TrySetPermits(bg, 5)
		require.NoError(t, err)
		require.False(t, ok)

		hctx, err := s.Acquire(bg, 2)
		require.NoError(t, err)
		require.NoError(t, s.AddPermits(bg, 3))
		require.Equal(t, 3, available(t, s))
		require.NoError(t, s.AddPermits(bg, -3)) // down to exactly what is in use
		require.Equal(t, 0, available(t, s))

		// SetPermits below what is in use: holders keep their permits.
		require.NoError(t, s.SetPermits(bg, 1))
		require.Equal(t, 0, available(t, s))
		require.NoError(t, s.Release(hctx, 1))
		require.Equal(t, 0, available(t, s))
		require.NoError(t, s.Release(hctx, 1))
		require.Equal(t, 1, available(t, s))
		require.NoError(t, s.SetPermits(bg, 0))
		require.Equal(t, 0, available(t, s))
	})
}

// TestSemaphoreCrashedHolder: a holder whose process dies (its connection
// closes under the Client, which never releases) gives its permits back
// within one watchdog timeout, while a live holder keeps them longer.
func TestSemaphoreCrashedHolder(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const wdt = 600 * time.Millisecond
		bg := context.Background()
		rdbA, crash := crashableRDB(t, e.addr)
		crashed := newClient(t, rdbA, WithWatchdogTimeout(wdt))
		live := e.client(t, WithWatchdogTimeout(wdt))
		waiter := e.client(t, WithWatchdogTimeout(wdt))
		sa, sl, sw := crashed.Semaphore("sem"), live.Semaphore("sem"), waiter.Semaphore("sem")
		require.NoError(t, sa.SetPermits(bg, 3))

		actx, err := sa.Acquire(bg, 2)
		require.NoError(t, err)
		lctx, err := sl.Acquire(bg, 1)
		require.NoError(t, err)

		// Both leases outlive the watchdog timeout while their holders live.
		time.Sleep(2 * wdt)
		require.NoError(t, actx.Err())
		require.NoError(t, lctx.Err())
		require.Equal(t, 0, available(t, sw))

		lag := watchLag(t)
		start := time.Now()
		crash() // no release, no renewal
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()
		wctx, err := sw.Acquire(ctx, 2)
		require.NoError(t, err)
		took := time.Since(start)
		require.Less(t, took, wdt+800*time.Millisecond+lag.Slack(), "permits not reclaimed within the lease (the machine's worst delay meanwhile: %v)", lag.Worst())
		require.Greater(t, took, wdt/3, "permits reclaimed before the lease could have run out")

		// The crashed holder was told (its local deadline fired).
		<-actx.Done()
		require.ErrorIs(t, context.Cause(actx), ErrLeaseLost)
		require.NoError(t, lctx.Err(), "the live holder kept its permit")

		require.NoError(t, sw.Release(wctx, 2))
		require.NoError(t, sl.Release(lctx, 1))
		require.Equal(t, 3, available(t, sw))
		require.Equal(t, []string{"sem"}, e.keys(t))
	})
}

// TestSemaphoreFixedLease: WithLease permits are not renewed and come back
// when the lease ends, by themselves, even if nobody waits for them.
func TestSemaphoreFixedLease(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const lease = time.Second
		bg := context.Background()
		c := e.client(t, WithWatchdogTimeout(3*time.Second))
		s := c.Semaphore("sem", WithLease(lease))
		require.NoError(t, s.SetPermits(bg, 2))
		start := time.Now()
		hctx, err := s.Acquire(bg, 2)
		require.NoError(t, err)
		require.Equal(t, 0, available(t, s))

		if e.real() {
			// The holder hears before the lease ends in Redis: when
			// another client sees the permits free, the holder's context
			// has already ended. (It only looks: nobody waits for them.)
			other := e.client(t).Semaphore("sem")
			held := rivalTakes(t, hctx, 5*time.Second, func(wctx context.Context) (func() error, error) {
				for {
					if n, err := other.Available(wctx); err != nil || n == 2 {
						return func() error { return nil }, err
					}
					time.Sleep(time.Millisecond)
				}
			})
			require.Error(t, held(), "the holder hears before the lease ends in Redis")
		}
		<-hctx.Done()
		require.ErrorIs(t, context.Cause(hctx), ErrLeaseLost)
		time.Sleep(time.Until(start.Add(lease + 100*time.Millisecond))) // the script ran after start
		require.Equal(t, 2, available(t, s), "expired permits counted as held")
		require.ErrorIs(t, s.Release(hctx, 2), ErrNotHeld)
		require.Equal(t, []string{"sem"}, e.keys(t))
	})
}

// TestSemaphoreWaitEndsWithContext: waits that end with their context
// return its error and the context they were given, and leave no permit
// and no waiter behind.
func TestSemaphoreWaitEndsWithContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		holder := e.client(t).Semaphore("sem")
		require.NoError(t, holder.SetPermits(bg, 2))
		hctx, err := holder.Acquire(bg, 1)
		require.NoError(t, err)

		c := e.client(t)
		s := c.Semaphore("sem")
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
				defer cancel()
				// Wants more than is free (2 of 1), or more than exist (3).
				got, err := s.Acquire(ctx, 2+i%2)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Nil(t, got)
			}()
		}
		// Cancelled rather than timed out, while waiting.
		cctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { _, err := s.Acquire(cctx, 2); errc <- err }()
		eventually(t, time.Second, "waiters subscribed", func() bool { return semSubscribed(c, s.channel, 1) })
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		wg.Wait()

		require.Equal(t, 0, semWaiters(c), "waiter left registered")
		eventually(t, time.Second, "channel unsubscribed", func() bool {
			return len(c.ps.Channels()) == 0
		})
		require.Equal(t, 1, available(t, s), "a cancelled wait leaked a permit")
		require.NoError(t, holder.Release(hctx, 1))
		require.Equal(t, 2, available(t, s))
		require.Equal(t, []string{"sem"}, e.keys(t))

		// An already-ended context is refused before any round trip.
		got, err := s.Acquire(cctx, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.Nil(t, got)
	})
}

// TestSemaphoreReleaseWakesWaiters: a release hands its permits to waiters
// in other processes promptly (by message, well before the periodic
// re-check), and only as many as permits came free.
func TestSemaphoreReleaseWakesWaiters(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		holder := e.client(t).Semaphore("sem")
		require.NoError(t, holder.SetPermits(bg, 3))
		hctx, err := holder.Acquire(bg, 3)
		require.NoError(t, err)

		c := e.client(t)
		s := c.Semaphore("sem")
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		got := make(chan context.Context, 5)
		for range 5 {
			go func() {
				h, err := s.Acquire(ctx, 1)
				if err == nil {
					got <- h
				}
			}()
		}
		eventually(t, 2*time.Second, "waiters subscribed", func() bool { return semSubscribed(c, s.channel, 5) })

		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, holder.Release(hctx, 2))
		var held []context.Context
		for range 2 {
			select {
			case h := <-got:
				held = append(held, h)
			case <-time.After(semWaitCap - 500*time.Millisecond):
				t.Fatal("release did not wake a waiter")
			}
		}
		require.Less(t, time.Since(start), semWaitCap/2+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		select {
		case <-got:
			t.Fatal("more waiters acquired than permits came free")
		case <-time.After(200 * time.Millisecond):
		}
		require.NoError(t, holder.Release(hctx, 1))
		select {
		case h := <-got:
			held = append(held, h)
		case <-time.After(semWaitCap - 500*time.Millisecond):
			t.Fatal("last release did not wake a waiter")
		}
		for _, h := range held {
			require.NoError(t, s.Release(h, 1))
		}
		for range 2 {
			h := <-got
			require.NoError(t, s.Release(h, 1))
		}
		cancel()
		require.Equal(t, 3, available(t, s))
	})
}

func TestSemaphoreWakePolicy(t *testing.T) {
	require.Equal(t, 2, wakeFreed("2"))
	require.Equal(t, 0, wakeFreed("0"))
	require.Equal(t, -1, wakeFreed("x"), "an unknown message wakes everyone to look")
}

// TestSemaphoreAcquireMoreThanTotal: asking for more permits than exist, or
// from a semaphore never set, waits until permits are added.
func TestSemaphoreAcquireMoreThanTotal(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		admin := e.client(t).Semaphore("sem")
		s := e.client(t).Semaphore("sem")
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()

		type res struct {
			ctx context.Context
			err error
		}
		done := make(chan res, 1)
		go func() { h, err := s.Acquire(ctx, 3); done <- res{h, err} }()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, admin.SetPermits(bg, 2)) // still too few
		select {
		case r := <-done:
			t.Fatalf("acquired 3 of 2 permits: %v", r.err)
		case <-time.After(200 * time.Millisecond):
		}
		start := time.Now()
		require.NoError(t, admin.AddPermits(bg, 1))
		r := <-done
		require.NoError(t, r.err)
		require.Less(t, time.Since(start), semWaitCap/2, "AddPermits did not wake the waiter")
		require.Equal(t, 3, s.held(r.ctx))
		require.NoError(t, s.Release(r.ctx, 3))
	})
}

// TestSemaphoreLostMessage: permits that come free without a message (here
// written behind the library's back) are still found by a waiter, within
// the bounded re-check.
func TestSemaphoreLostMessage(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		s := c.Semaphore("sem")
		require.NoError(t, s.SetPermits(bg, 0))
		ctx, cancel := context.WithTimeout(bg, semWaitCap+2*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			h, err := s.Acquire(ctx, 1)
			if err == nil {
				err = s.Release(h, 1)
			}
			done <- err
		}()
		eventually(t, time.Second, "waiter subscribed", func() bool { return semSubscribed(c, s.channel, 1) })
		require.NoError(t, e.rdb(t).HSet(bg, "sem", "permits", 1).Err()) // no message
		require.NoError(t, <-done)
	})
}

// TestSemaphoreScriptsIdempotent: a script that go-redis resends after a
// network error (the same call twice) cannot count twice.
func TestSemaphoreScriptsIdempotent(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rdb := e.rdb(t)
		s := e.client(t).Semaphore("sem")
		require.NoError(t, s.SetPermits(bg, 5))
		for range 2 {
			r, err := lua.SemAcquire.Run(bg, rdb, s.keys, "f", 2, 0, 10000, "publish", semReclaimLimit, 0, s.channel).Int64Slice()
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2, 1}, r)
		}
		require.Equal(t, 3, available(t, s))
		for range 2 {
			r, err := lua.SemAcquire.Run(bg, rdb, s.keys, "f", 1, 2, 10000, "publish", semReclaimLimit, 0, s.channel).Int64Slice()
			require.NoError(t, err)
			require.Equal(t, []int64{1, 3, 1}, r)
		}
		require.Equal(t, 2, available(t, s))
		for range 2 {
			r, err := lua.SemRelease.Run(bg, rdb, s.keys, "f", 1, 3, "publish", semReclaimLimit, s.channel).Int64()
			require.NoError(t, err)
			require.EqualValues(t, 1, r)
		}
		require.Equal(t, 3, available(t, s))
		for i := range 2 {
			r, err := lua.SemRelease.Run(bg, rdb, s.keys, "f", 2, 2, "publish", semReclaimLimit, s.channel).Int64()
			require.NoError(t, err)
			require.EqualValues(t, 2+i, r, "released, then gone (3: its caller knows whether it resent it)")
		}
		require.Equal(t, 5, available(t, s))
		// A lost hold (prev > 0, nothing in Redis) is reported, not revived.
		r, err := lua.SemAcquire.Run(bg, rdb, s.keys, "f", 1, 2, 10000, "publish", semReclaimLimit, 0, s.channel).Int64Slice()
		require.NoError(t, err)
		require.EqualValues(t, -1, r[0])
		require.Equal(t, 5, available(t, s))
		require.Equal(t, []string{"sem"}, e.keys(t))
	})
}

// TestSemaphoreReclaimsManyExpired: more expired holders than one script
// reclaims are all reclaimed, and Available never counts them.
func TestSemaphoreReclaimsManyExpired(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rdb := e.rdb(t)
		s := e.client(t).Semaphore("sem")
		const dead = 2*semReclaimLimit + 50
		pipe := rdb.Pipeline()
		pipe.HSet(bg, "sem", "permits", dead+1, "used", dead)
		for i := range dead {
			f := fmt.Sprintf("dead:%d", i)
			pipe.HSet(bg, s.keys[1], f, 1)
			pipe.ZAdd(bg, s.keys[2], redis.Z{Score: float64(1000 + i), Member: f})
		}
		_, err := pipe.Exec(bg)
		require.NoError(t, err)

		require.Equal(t, dead+1, available(t, s))
		hctx, err := s.TryAcquire(bg, dead+1)
		require.NoError(t, err)
		require.NoError(t, s.Release(hctx, dead+1))
		require.Equal(t, []string{"sem"}, e.keys(t))
	})
}

// TestSemaphoreDeletedTotal: deleting the semaphore's key while permits are
// held does not lose count of them: SetPermits counts them again.
func TestSemaphoreDeletedTotal(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		s := e.client(t).Semaphore("sem")
		require.NoError(t, s.SetPermits(bg, 3))
		hctx, err := s.Acquire(bg, 2)
		require.NoError(t, err)
		require.NoError(t, e.rdb(t).Del(bg, "sem").Err())
		require.Equal(t, 0, available(t, s))
		require.NoError(t, s.SetPermits(bg, 3))
		require.Equal(t, 1, available(t, s))
		require.NoError(t, s.Release(hctx, 2))
		require.Equal(t, 3, available(t, s))
	})
}

func TestSemaphoreErrorsWrapName(t *testing.T) {
	e := miniEnv(t)
	s := e.client(t).Semaphore("jobs")
	_, err := s.TryAcquire(context.Background(), 1)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Contains(t, err.Error(), `"jobs"`)
	require.False(t, errors.Is(err, ErrInvalid))
}

// TestSemaphoreAndLatchOnCluster: a semaphore's keys share one Cluster slot
// (its scripts would fail with CROSSSLOT otherwise), and waiters in other
// clients are woken across the cluster.
func TestSemaphoreAndLatchOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	bg := context.Background()
	a := newClient(t, cl.Client(t))
	b := newClient(t, cl.Client(t))
	for _, name := range []string{"jobs", "{app}:jobs"} {
		sa, sb := a.Semaphore(name), b.Semaphore(name)
		require.NoError(t, sa.SetPermits(bg, 1))
		hctx, err := sa.Acquire(bg, 1)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, semWaitCap/2)
		got := make(chan error, 1)
		go func() {
			h, err := sb.Acquire(ctx, 1)
			if err == nil {
				err = sb.Release(h, 1)
			}
			got <- err
		}()
		eventually(t, time.Second, "waiter subscribed", func() bool { return semSubscribed(b, sb.channel, 1) })
		require.NoError(t, sa.Release(hctx, 1))
		require.NoError(t, <-got, name)
		cancel()
		n, err := sa.Available(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}

	la, lb := a.CountDownLatch("done"), b.CountDownLatch("done")
	_, err := la.TrySetCount(bg, 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, latchRecheck/2)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- lb.Wait(ctx) }()
	eventually(t, time.Second, "waiter subscribed", func() bool { return semSubscribed(b, lb.channel, 1) })
	require.NoError(t, la.CountDown(bg))
	require.NoError(t, <-got)
}

// TestSemaphorePartitionedHolder: a holder cut off from Redis by a silent
// partition is told its permits are lost before another client can take
// them, and the permits come back within one watchdog timeout.
func TestSemaphorePartitionedHolder(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const wdt = 600 * time.Millisecond
		bg := context.Background()
		proxy := faultproxy.New(t, e.addr)
		a := newClient(t, newRDB(t, proxy.Addr()), WithWatchdogTimeout(wdt))
		b := e.client(t, WithWatchdogTimeout(wdt))
		sa, sb := a.Semaphore("sem"), b.Semaphore("sem")
		require.NoError(t, sa.SetPermits(bg, 2))
		actx, err := sa.Acquire(bg, 2)
		require.NoError(t, err)

		lag := watchLag(t)
		start := time.Now()
		proxy.Blackhole(true)
		defer proxy.Blackhole(false)
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()
		bctx, err := sb.Acquire(ctx, 2)
		// The order is the promise: when another client has the permits,
		// the partitioned holder's context has already ended (its Err
		// reads the local deadline itself, whenever its timer runs).
		held := actx.Err()
		require.NoError(t, err)
		acquired := time.Now()
		require.Error(t, held, "permits taken while the partitioned holder still thinks it holds them")
		require.Less(t, acquired.Sub(start), wdt+800*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		require.ErrorIs(t, context.Cause(actx), ErrLeaseLost)
		require.NoError(t, sb.Release(bctx, 2))
	})
}

// A waiter woken for permits it cannot use (it needs more than came free)
// passes the wake-up to a waiter behind it that needs fewer, which gets them
// at once rather than at its next periodic re-check.
func TestSemaphoreWakeUpPassesToSmallerWaiter(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		holder := e.client(t).Semaphore("mixed")
		require.NoError(t, holder.SetPermits(bg, 2))
		hctx, err := holder.Acquire(bg, 2)
		require.NoError(t, err)

		c := e.client(t)
		s := c.Semaphore("mixed")
		big := make(chan error, 1)
		bigCtx, cancelBig := context.WithCancel(bg)
		defer cancelBig()
		go func() { _, err := s.Acquire(bigCtx, 2); big <- err }()
		eventually(t, time.Second, "the big waiter subscribed", func() bool { return semSubscribed(c, s.channel, 1) })
		small := make(chan time.Time, 1)
		smallDone := make(chan struct{})
		go func() {
			defer close(smallDone)
			sctx, err := s.Acquire(bg, 1)
			if assert.NoError(t, err) {
				small <- time.Now()
				assert.NoError(t, s.Release(sctx, 1))
			}
		}()
		eventually(t, time.Second, "the small waiter subscribed", func() bool { return semSubscribed(c, s.channel, 2) })

		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, holder.Release(hctx, 1))
		select {
		case got := <-small:
			assert.Less(t, got.Sub(start), semWaitCap/2+lag.Slack(), "the small waiter waited for its re-check (the machine's worst delay meanwhile: %v)", lag.Worst())
		case <-time.After(2 * semWaitCap):
			t.Fatal("the small waiter never got the free permit")
		}
		<-smallDone
		cancelBig()
		require.ErrorIs(t, <-big, context.Canceled)
		require.NoError(t, holder.Release(hctx, 1))
	})
}
