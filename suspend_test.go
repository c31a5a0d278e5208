package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// suspend stands for the machine being suspended for d (a laptop lid, a
// VM suspended by its guest): the monotonic clock, which Go's timers and
// time.Since read, does not count that time; the wall clock does (see
// internal/lease/clock.go). It cannot suspend the test's machine, nor Redis: only the
// client's reading of the two clocks moves.
func suspend(t *testing.T, d time.Duration) {
	t.Helper()
	lease.TestSuspend.Add(int64(d))
	t.Cleanup(func() { lease.TestSuspend.Add(-int64(d)) })
}

// Issue 24: the local deadline ran on the monotonic clock, which stops
// while the machine is suspended, so a hold whose lease ran out in Redis
// during a suspend was still reported live after it. From the moment the
// machine runs again, the hold's context tells the truth, and a goroutine
// already waiting on its Done channel is told soon (within a second), not
// when the monotonic clock reaches the deadline (2.7 s later here).
func TestHoldToldAfterSuspend(t *testing.T) {
	forEachEnvSerial(t, func(t *testing.T, e *testEnv) {
		c := e.client(t)
		m := c.Mutex("suspended", WithLease(3*time.Second))
		lctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		done := make(chan time.Time, 1)
		go func() {
			<-lctx.Done()
			done <- time.Now()
		}()
		time.Sleep(20 * time.Millisecond) // the goroutine waits on Done
		suspend(t, 10*time.Second)
		resumed := time.Now()
		var at time.Time
		select {
		case at = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a goroutine waiting on the hold's Done was never told")
		}
		assert.Less(t, at.Sub(resumed), 2*time.Second, "told %v after the machine resumed", at.Sub(resumed))
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
		assert.ErrorIs(t, m.Unlock(lctx), ErrLeaseLost)
	})
}

// The hold's context read right after the suspend tells it at once, before
// any timer or check has run.
func TestHoldErrAfterSuspend(t *testing.T) {
	forEachEnvSerial(t, func(t *testing.T, e *testEnv) {
		c := e.client(t, WithWatchdogTimeout(3*time.Second))
		m := c.Mutex("suspended-err")
		lctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		suspend(t, 10*time.Second)
		require.Error(t, lctx.Err(), "the hold's context is live after its lease ran out")
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
	})
}

// A suspend shorter than what is left of the lease loses nothing, and the
// time it took counts: the deadline comes that much earlier.
func TestShortSuspendCounts(t *testing.T) {
	e := miniEnv(t)
	c := e.client(t)
	m := c.Mutex("short-suspend", WithLease(3*time.Second))
	lctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	start := time.Now()
	suspend(t, 2*time.Second)
	require.NoError(t, lctx.Err(), "0.7 s of the lease is left")
	<-lctx.Done()
	took := time.Since(start)
	// Told 0.7 s after the suspend, or at the next look at the clocks
	// (within a second); not 2.7 s after it, as the monotonic clock has it.
	assert.Less(t, took, 2*time.Second, "the deadline did not count the suspend (told after %v)", took)
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
}
