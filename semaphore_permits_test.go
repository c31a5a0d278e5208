package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 19, item 4: a Semaphore whose handle states its total
// (WithPermits) is usable with no TrySetPermits first, and again after a
// real redis-server restarted without its data, where a total set once
// would be gone and every Acquire would wait forever.
func TestSemaphoreWithPermitsSurvivesDataLoss(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	a := e.client(t).Semaphore("sem:loss", WithPermits(2))
	b := e.client(t).Semaphore("sem:loss", WithPermits(2))
	acquire := func(s *Semaphore, n int) (context.Context, error) {
		return s.TryAcquireFor(bg, n, 2*time.Second) // bounds the wait, not the hold
	}

	hctx, err := acquire(a, 1)
	require.NoError(t, err, "the first acquisition creates the total")
	n, err := b.Available(bg)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = b.TryAcquire(bg, 2)
	assert.ErrorIs(t, err, ErrNotAcquired, "the total is 2, one held")
	require.NoError(t, a.Release(hctx, 1))

	e.srv.Restart(t) // the total is lost with every key
	n, err = b.Available(bg)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "Available through the handle counts a missing total as stated")
	hctx, err = acquire(b, 2)
	require.NoError(t, err, "an acquisition after the loss creates the total again")
	_, err = a.TryAcquire(bg, 1)
	assert.ErrorIs(t, err, ErrNotAcquired, "no more than the stated total")
	require.NoError(t, b.Release(hctx, 2))
	total, err := e.rdb(t).HGet(bg, "sem:loss", "permits").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, total)
}

// A waiter on a semaphore whose total is missing is woken by the
// acquisition that creates it, not after its wait's bound.
func TestSemaphoreWithPermitsWakesWaiters(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		plain := e.client(t).Semaphore("sem:wake") // states no total: waits
		w := lockAsync(bg, func(ctx context.Context) (context.Context, error) { return plain.Acquire(ctx, 1) })
		time.Sleep(100 * time.Millisecond)
		s := e.client(t).Semaphore("sem:wake", WithPermits(3))
		hctx, err := s.TryAcquire(bg, 1)
		require.NoError(t, err)
		got := recvLock(t, w, time.Second, "the waiter, woken when the total is created")
		require.NoError(t, got.err)
		require.NoError(t, plain.Release(got.ctx, 1))
		require.NoError(t, s.Release(hctx, 1))
	})
}

// WithPermits creates a missing total and never changes one that is set.
func TestSemaphoreWithPermitsKeepsASetTotal(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		require.NoError(t, c.Semaphore("sem:set").SetPermits(bg, 5))
		s := c.Semaphore("sem:set", WithPermits(1))
		hctx, err := s.TryAcquire(bg, 3)
		require.NoError(t, err, "the total set (5) stands")
		n, err := s.Available(bg)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, s.Release(hctx, 3))

		ok, err := c.Semaphore("sem:try", WithPermits(4)).TrySetPermits(bg, 7)
		require.NoError(t, err)
		assert.True(t, ok, "nothing created before an acquisition")
		hctx, err = c.Semaphore("sem:try", WithPermits(4)).TryAcquire(bg, 6)
		require.NoError(t, err)
		require.NoError(t, c.Semaphore("sem:try").Release(hctx, 6))
	})
}

// Bad totals, and the primitives the option does not apply to, are
// refused with ErrInvalid.
func TestWithPermitsRefused(t *testing.T) {
	c := miniEnv(t).client(t)
	bg := context.Background()
	for _, n := range []int{0, -1, maxPermits + 1} {
		_, err := c.Semaphore("s", WithPermits(n)).TryAcquire(bg, 1)
		assert.ErrorIs(t, err, ErrInvalid, "WithPermits(%d)", n)
	}
	// On a Mutex, a FairMutex or an RWMutex it does not compile
	// (TestOptionsTyped).
}
