package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A downgraded read hold (w := Lock; rd := RLock(w)) re-enters while the
// write lock is still held, as it does after the write Unlock: the re-entry
// counts, the read hold stays live through its renewals in write mode, and
// each RUnlock of the re-entered hold, before and after the write Unlock,
// leaves the rest. Once everything is released, another writer gets the
// lock at once.
func TestRWMutexDowngradeReenteredWhileWriteHeld(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		if e.mr != nil {
			realTimeTTL(t, e.mr) // leases run out in real time
		}
		const name = "rw:downgrade-reenter"
		const lease = 600 * time.Millisecond
		r := e.client(t, WithWatchdogTimeout(lease)).RWMutex(name)
		other := e.client(t).RWMutex(name)
		bg := context.Background()
		rhold := func(ctx context.Context) int {
			t.Helper()
			n, err := r.RHoldCount(ctx)
			require.NoError(t, err)
			return n
		}

		w, err := r.Lock(bg)
		require.NoError(t, err)
		rd, err := r.RLock(w)
		require.NoError(t, err)
		again, err := r.RLock(rd)
		require.NoError(t, err, "re-entering the downgraded read hold while the write lock is held")
		require.NoError(t, rd.Err(), "the read hold stays live")
		assert.Equal(t, 2, rhold(rd))

		// Renewed in write mode, for longer than a lease.
		time.Sleep(2 * lease)
		require.NoError(t, w.Err())
		require.NoError(t, rd.Err())
		_, err = other.TryLock(bg)
		assert.ErrorIs(t, err, ErrNotAcquired)
		_, err = other.TryRLock(bg)
		assert.ErrorIs(t, err, ErrNotAcquired, "still write-locked")

		// RUnlock of the re-entry before the write Unlock.
		require.NoError(t, r.RUnlock(again))
		require.NoError(t, rd.Err())
		assert.Equal(t, 1, rhold(rd))
		again, err = r.RLock(rd)
		require.NoError(t, err)
		assert.Equal(t, 2, rhold(rd))

		// And after it.
		require.NoError(t, r.Unlock(w))
		require.NoError(t, rd.Err(), "the read hold outlives the write hold")
		locked, write, readers := rwState(t, r)
		assert.True(t, locked)
		assert.False(t, write)
		assert.Equal(t, 1, readers)
		require.NoError(t, r.RUnlock(again))
		assert.Equal(t, 1, rhold(rd))
		require.NoError(t, rd.Err())
		require.NoError(t, r.RUnlock(rd))

		// TryLock does not wait: its success says nothing was left to
		// run out first (a clock around it would only measure the machine).
		o, err := other.TryLock(bg)
		require.NoError(t, err, "nothing left that keeps writers out")
		require.NoError(t, other.Unlock(o))
		assert.Empty(t, e.keys(t))
	})
}
