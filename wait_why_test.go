package redisync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wait that ends while Redis refuses connections says so: its error
// wraps the context's error (or ErrNotAcquired, for TryLockFor's bound) and
// the error of its last failed attempt (its client gives up dialing after
// one retry here; by default go-redis takes about 3.3s), or says that its
// last attempt had no reply, so an operator tells an unreachable Redis from a busy lock; a
// wait for a busy lock on a working Redis says nothing more than the
// context's error.
func TestWaitEndsSayingWhyRedisDidNotAnswer(t *testing.T) {
	t.Parallel() // mostly waiting
	e := realEnv(t)
	bg := context.Background()
	const why = "connection refused"
	for i, kind := range releaseKinds {
		t.Run(kind.taking, func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("why:%d", i)
			l := newFaultyLink(t, e.addr, oneDialRetry)
			c := newClient(t, l.rdb)
			if kind.setup != nil {
				kind.setup(t, c, name)
			}
			l.refuse.Store(true)
			l.p.CutAll()
			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			defer cancel()
			hctx, err := kind.acquire(c, ctx, name)
			require.Error(t, err)
			require.Nil(t, hctx)
			t.Logf("%v", err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), why)
			var op *net.OpError
			assert.ErrorAs(t, err, &op, "the attempt's error is wrapped")
		})
	}
	t.Run("TryLockFor", func(t *testing.T) {
		t.Parallel()
		l := newFaultyLink(t, e.addr, oneDialRetry)
		c := newClient(t, l.rdb)
		l.refuse.Store(true)
		l.p.CutAll()
		_, err := c.Mutex("why:bounded").TryLockFor(bg, 2*time.Second)
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, ErrNotAcquired, "the wait's bound ran out")
		assert.False(t, errors.Is(err, context.DeadlineExceeded), "the caller's context did not end")
		assert.Contains(t, err.Error(), why)
	})
	t.Run("no reply", func(t *testing.T) {
		t.Parallel()
		l := newFaultyLink(t, e.addr)
		c := newClient(t, l.rdb)
		l.refuse.Store(true)
		l.p.CutAll()
		ctx, cancel := context.WithTimeout(bg, 600*time.Millisecond) // before go-redis gives up dialing
		defer cancel()
		_, err := c.Mutex("why:short").Lock(ctx)
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		// What the wire said (it said "the last attempt had no reply
		// within ..." while go-redis dialled and retried inside).
		assert.Contains(t, err.Error(), why)
	})
	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		holder := e.client(t)
		hctx, err := holder.Mutex("why:busy").Lock(bg)
		require.NoError(t, err)
		defer func() { require.NoError(t, holder.Mutex("why:busy").Unlock(hctx)) }()
		ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
		defer cancel()
		_, err = e.client(t).Mutex("why:busy").Lock(ctx)
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotContains(t, err.Error(), "last attempt")
	})
}

// oneDialRetry makes go-redis give up dialing after one retry.
func oneDialRetry(o *redis.Options) { o.DialerRetries = 1 }
