package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A write hold lost by its deadline, with a downgrade taken through a
// context derived from it (a value on top): the write hold's end decides
// whether the downgrade's context ended by itself without waiting for
// that end (it would never come), and every context tells the loss.
func TestHoldCtxDowngradeThroughDerivedContextLostByDeadline(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		// 1s: the downgrade must be taken while the write hold lives (on a
		// loaded machine Lock then RLock once outlasted a lease of 100ms);
		// the test then waits past the read hold's lease, which its script
		// set before RLock returned.
		const lease = time.Second
		rw := c.RWMutex("holdctx:down", WithLease(lease))
		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		type key struct{}
		vctx := context.WithValue(wctx, key{}, 1)
		dctx, err := rw.RLock(vctx)
		require.NoError(t, err)
		time.Sleep(lease + 50*time.Millisecond) // past both fixed leases
		done := make(chan struct{})
		go func() {
			defer close(done)
			assert.Error(t, vctx.Err())
			assert.Error(t, wctx.Err())
			assert.Error(t, dctx.Err())
			assert.ErrorIs(t, context.Cause(wctx), ErrLeaseLost)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the contexts' methods hang")
		}
		assert.ErrorIs(t, rw.RUnlock(dctx), ErrLeaseLost)
		assert.ErrorIs(t, rw.Unlock(wctx), ErrLeaseLost)
	})
}
