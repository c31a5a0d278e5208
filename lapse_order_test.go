package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 42, break 5: a holder stopped (a suspend here, see suspend_test.go)
// past both its lease and the end of the context it took the hold with is
// told the end that came first in time, whichever the process looks at
// first on resuming. These tests are serial: the suspend moves the clock
// of every hold in the process.

// lapseOrderKinds are the holds of these tests: every primitive of
// apiKinds, an Election's leadership, and an RWMutex's downgrade (a read
// hold taken with the write hold's context, released with it), each
// taken with ctx and released.
func lapseOrderKinds(t *testing.T, c *Client) map[string]func(ctx context.Context) (context.Context, func(context.Context) error) {
	t.Helper()
	kinds := map[string]func(ctx context.Context) (context.Context, func(context.Context) error){}
	for _, k := range apiKinds {
		name := "lapse:" + k.name
		k.setup(t, c, name)
		ops := k.mine(t, c, name)
		kinds[k.name] = func(ctx context.Context) (context.Context, func(context.Context) error) {
			hctx, err := ops.lock(ctx)
			require.NoError(t, err, k.name)
			return hctx, ops.unlock
		}
	}
	el := c.Election("lapse:Election")
	kinds["Election"] = func(ctx context.Context) (context.Context, func(context.Context) error) {
		hctx, err := el.Campaign(ctx, "me")
		require.NoError(t, err, "Election")
		return hctx, el.Resign
	}
	rw := c.RWMutex("lapse:Downgrade")
	kinds["RWMutexDowngrade"] = func(ctx context.Context) (context.Context, func(context.Context) error) {
		wctx, err := rw.Lock(ctx)
		require.NoError(t, err, "RWMutexDowngrade")
		dctx, err := rw.RLock(wctx)
		require.NoError(t, err, "RWMutexDowngrade")
		return dctx, func(dctx context.Context) error {
			return errors.Join(rw.RUnlock(dctx), rw.Unlock(wctx))
		}
	}
	return kinds
}

// A cancellation without a deadline counts as happening when the process
// sees it: a context cancelled on resuming (a signal's handler, say) after
// a suspend past the lease ends the hold as lost (on main the
// cancellation reached the hold's context first: its cause was
// context.Canceled and Unlock returned nil).
func TestCancelSeenAfterALapseIsALoss(t *testing.T) {
	forEachEnvSerial(t, func(t *testing.T, e *testEnv) {
		c := e.client(t, WithWatchdogTimeout(3*time.Second))
		for what, lock := range lapseOrderKinds(t, c) {
			t.Run(what, func(t *testing.T) {
				parent, cancel := context.WithCancel(context.Background())
				defer cancel()
				lctx, unlock := lock(parent)
				suspend(t, 10*time.Second)
				cancel() // seen after the lease's deadline
				assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
				assert.ErrorIs(t, lctx.Err(), context.Canceled)
				assert.ErrorIs(t, unlock(lctx), ErrLeaseLost)
			})
		}
	})
}

// A context whose deadline came before the lease's, both passed during a
// suspend: the hold ended with its context, and the first look at the
// hold's context tells it, before the context's own timer has run (on
// main that look found the lease's deadline passed and ended the hold as
// lost).
func TestDeadlineBeforeALapseIsTheContexts(t *testing.T) {
	forEachEnvSerial(t, func(t *testing.T, e *testEnv) {
		c := e.client(t, WithWatchdogTimeout(3*time.Second))
		for what, lock := range lapseOrderKinds(t, c) {
			t.Run(what, func(t *testing.T) {
				parent, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				lctx, unlock := lock(parent)
				suspend(t, 10*time.Second) // past the context's deadline (1s), then the lease's (2.7s)
				assert.ErrorIs(t, lctx.Err(), context.DeadlineExceeded)
				assert.ErrorIs(t, context.Cause(lctx), context.DeadlineExceeded)
				assert.NoError(t, unlock(lctx), "the hold was the caller's until its context ended")
			})
		}
	})
}
