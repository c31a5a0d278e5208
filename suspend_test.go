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

// stepWall stands for the wall clock being stepped by d (NTP, by hand):
// forward for d > 0, back for d < 0; the monotonic clock does not move.
// To the client a step forward looks the same as a suspend.
func stepWall(t *testing.T, d time.Duration) {
	t.Helper()
	lease.TestSuspend.Add(int64(d))
	t.Cleanup(func() { lease.TestSuspend.Add(-int64(d)) })
}

// Issue 33 (5): a wall clock stepped back during a hold, and then a
// suspend as long: the step back soaked up the suspend (the lead's rise
// was counted from the deadline's stamp, and came back only to it), so a
// 3 s hold was reported live after a 10 s suspend. What counts is the
// lead's rise from the lowest it was seen at. For a fixed lease and for a
// renewed one.
func TestWallStepBackThenSuspendDuringHold(t *testing.T) {
	e := realEnv(t)
	c := e.client(t, WithWatchdogTimeout(3*time.Second))
	for _, opt := range []LockOption{WithLease(3 * time.Second), WithRenewedLease(3 * time.Second)} {
		m := c.Mutex("stepped-back", opt)
		lctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		stepWall(t, -10*time.Second)
		require.NoError(t, lctx.Err(), "a wall clock stepped back ended the hold")
		suspend(t, 10*time.Second)
		require.Error(t, lctx.Err(), "the hold is reported live after a 10 s suspend of its 3 s lease")
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
		assert.ErrorIs(t, m.Unlock(lctx), ErrLeaseLost)
	}
}

// The same with nothing reading the hold's context between the step back
// and the suspend: the watchdog reads the clock every second, and that
// reading is enough.
func TestWallStepBackSeenByTheWatchdog(t *testing.T) {
	e := realEnv(t)
	c := e.client(t)
	m := c.Mutex("stepped-back-unread", WithLease(5*time.Second)) // no renewal reads the clock
	lctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	stepWall(t, -10*time.Second)
	time.Sleep(1500 * time.Millisecond) // the watchdog reads the clock
	suspend(t, 10*time.Second)
	require.Error(t, lctx.Err(), "the hold is reported live after a 10 s suspend of its 5 s lease")
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
}

// A wall clock stepped back before the hold is taken, then a suspend
// during it: the hold is lost.
func TestWallStepBackBeforeHoldThenSuspend(t *testing.T) {
	e := realEnv(t)
	c := e.client(t)
	m := c.Mutex("stepped-back-before", WithLease(3*time.Second))
	stepWall(t, -10*time.Second)
	lctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	suspend(t, 10*time.Second)
	require.Error(t, lctx.Err(), "the hold is reported live after a 10 s suspend of its 3 s lease")
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
}

// A wall clock stepped back during a hold makes no deadline later (a
// fixed lease's holder is told when its lease runs out, not 10 s after)
// and loses nothing (a renewed hold goes on being renewed).
func TestWallStepBackDuringHoldChangesNothing(t *testing.T) {
	e := realEnv(t)
	c := e.client(t, WithWatchdogTimeout(time.Second))
	fixed, err := c.Mutex("stepped-back-fixed", WithLease(time.Second)).Lock(context.Background())
	require.NoError(t, err)
	renewed, err := c.Mutex("stepped-back-renewed").Lock(context.Background())
	require.NoError(t, err)
	start := time.Now()
	stepWall(t, -10*time.Second)
	select {
	case <-fixed.Done():
		assert.Less(t, time.Since(start), 3*time.Second, "the fixed lease's holder was told late")
	case <-time.After(5 * time.Second):
		t.Fatal("a wall clock stepped back made a 1 s fixed lease's deadline later than 5 s")
	}
	assert.ErrorIs(t, context.Cause(fixed), ErrLeaseLost)
	time.Sleep(1500 * time.Millisecond) // 2.5 renewed leases in all
	assert.NoError(t, renewed.Err(), "a renewed hold ended after a wall clock stepped back")
}

// A wall clock stepped forward during a hold counts as elapsed time: the
// holder is told early, never late.
func TestWallStepForwardDuringHold(t *testing.T) {
	e := realEnv(t)
	c := e.client(t)
	lctx, err := c.Mutex("stepped-forward", WithLease(3*time.Second)).Lock(context.Background())
	require.NoError(t, err)
	stepWall(t, 10*time.Second)
	require.Error(t, lctx.Err(), "a hold is reported live 10 s (on the wall clock) into its 3 s lease")
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
}

// A wall clock stepped forward before a hold is taken costs it nothing:
// a renewed hold lives on, and a suspend during it still counts.
func TestWallStepForwardBeforeHold(t *testing.T) {
	e := realEnv(t)
	c := e.client(t, WithWatchdogTimeout(time.Second))
	stepWall(t, 10*time.Second)
	renewed, err := c.Mutex("stepped-forward-renewed").Lock(context.Background())
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond)
	require.NoError(t, renewed.Err(), "a renewed hold ended after a wall clock stepped forward before it")
	suspend(t, 3*time.Second)
	require.Error(t, renewed.Err(), "the hold is reported live after a 3 s suspend of its 1 s lease")
	assert.ErrorIs(t, context.Cause(renewed), ErrLeaseLost)
}
