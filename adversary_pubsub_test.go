package redisync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
)

// A waiter subscribes a channel and leaves at once: its SUBSCRIBE is
// written (late) and confirmed, and its UNSUBSCRIBE, written right after,
// stalls past its deadline and fails, while the reader holds the
// SUBSCRIBE's confirmation, read from the old connection, waiting for the
// PubSub's lock. go-redis then reconnects without the channel (its
// UNSUBSCRIBE dropped it); the writer resets the connection's states
// (writeFailed); the reader then applies the old connection's
// confirmation. The channel must not count as subscribed: a new waiter on
// it must subscribe it again and be woken by the unlock, not sleep through
// the holder's 30s lease.
func TestAdvStaleConfirmationAfterWriteFailure(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	ctx := context.Background()
	admin := e.rdb(t)
	holder := e.client(t) // default 30s watchdog lease
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr, WriteTimeout: 500 * time.Millisecond})
	waiter := newClient(t, rdb)
	const rounds = 5
	for i := range rounds {
		name := fmt.Sprintf("adv:stale:%d", i)
		channel := faultMutexChannel(name)
		onChannel := func(args []string) bool { return len(args) > 1 && args[1] == channel }
		hold, err := holder.Mutex(name).Lock(ctx)
		require.NoError(t, err)

		// The SUBSCRIBE is written 200ms late (within its deadline); the
		// UNSUBSCRIBE after it stalls 800ms and fails at its deadline.
		slowSub := h.OnWrite(faultproxy.WriteRule{Name: "SUBSCRIBE", Args: onChannel, Times: 1, Action: faultproxy.DelayWrite(200 * time.Millisecond)})
		stall := h.OnWrite(faultproxy.WriteRule{Name: "UNSUBSCRIBE", Args: onChannel, Times: 1, Action: faultproxy.DelayWrite(800 * time.Millisecond)})
		lctx, lcancel := context.WithCancel(ctx)
		ldone := faultLockAsync(lctx, waiter.Mutex(name))
		eventually(t, 2*time.Second, "the SUBSCRIBE held back", func() bool { return slowSub.Fired() == 1 })
		lcancel() // leaves while its SUBSCRIBE is being written
		require.ErrorIs(t, (<-ldone).err, context.Canceled)
		eventually(t, 2*time.Second, "the UNSUBSCRIBE stalled", func() bool { return stall.Fired() == 1 })
		time.Sleep(1200 * time.Millisecond) // it failed; go-redis is on a new connection

		left := subStateOf(waiter, channel)
		wctx, wcancel := context.WithTimeout(ctx, 6*time.Second)
		done := faultLockAsync(wctx, waiter.Mutex(name))
		time.Sleep(300 * time.Millisecond)
		lag := watchLag(t)
		unlocked := time.Now()
		require.NoError(t, holder.Mutex(name).Unlock(hold))
		r := <-done
		wcancel()
		require.NoError(t, r.err, "round %d: the new waiter was not woken by the unlock (Redis subscribers on its channel: %d; "+
			"its state on the connection, with no waiter, before the new waiter came: %s)",
			i, faultNumSub(t, admin, channel), left)
		lag.Stop()
		require.Less(t, r.at.Sub(unlocked), 2*time.Second+lag.Slack(), "round %d: the waiter got the lock late (the machine's worst delay meanwhile: %v)", i, lag.Worst())
		require.NoError(t, waiter.Mutex(name).Unlock(r.hctx))
	}
}

// subStateOf describes channel's state on c's subscription connections.
func subStateOf(c *Client, channel string) string {
	return c.ps.Describe(channel)
}
