package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// A downgrade (RLock through a context that holds the write lock) whose
// write hold is lost while its script is on its way fails with
// ErrLeaseLost: the read lock it would get is no downgrade, since another
// writer may have held the lock in between (here one does). Found by the
// abandonment sweep (RWMutex.RLock (downgrade), lease-lost): the script
// ran while the write hold was there, its reply came after the write
// lease, the grant could not be trusted and was given back, and the next
// attempt took a fresh read lock, returned nil and a live read hold.
func TestDowngradeThroughWriteHoldLostMidFlight(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	ctx := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.RWRLock.Load(ctx, e.rdb(t)).Err())
	const lease = 300 * time.Millisecond
	rw := c.RWMutex("downgrade", WithLease(lease))
	w, err := rw.Lock(ctx)
	require.NoError(t, err)

	// Another writer, once the write lease has run out.
	other := e.client(t).RWMutex("downgrade")
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(lease + 100*time.Millisecond)
		ow, err := other.TryLock(ctx)
		if err == nil {
			err = other.Unlock(ow)
		}
		wrote <- err
	}()

	slow := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.RWRLock.Script), Times: 1,
		Action: faultproxy.DelayReply(2 * lease)})
	// A context that carries the write hold but does not end with it.
	_, err = rw.RLock(context.WithoutCancel(w))
	require.Equal(t, 1, slow.Fired())
	require.NoError(t, <-wrote, "another writer held the lock while the downgrade's reply was on its way")
	assert.ErrorIs(t, context.Cause(w), ErrLeaseLost)
	require.Error(t, err, "a downgrade through a write hold lost meanwhile returned a read hold")
	assert.ErrorIs(t, err, ErrLeaseLost)
	assert.ErrorIs(t, err, ErrNotHeld)
	eventually(t, 2*time.Second, "nothing left of the refused downgrade", func() bool {
		n, err := rwReaders(ctx, rw)
		return err == nil && n == 0
	})
}
