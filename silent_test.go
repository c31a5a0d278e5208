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

// Calls over a link that has gone silent, or that is slow or reset: every
// call returns within its context or its documented bound, and a caller
// that leaves early leaves behind no bookkeeping that assumes its call
// has finished.

// timed runs f in a goroutine and returns its error and how long it took;
// when it has not returned after limit, the test fails, heal runs, and
// timed waits for f (at most 40s) before returning.
func timed(t *testing.T, limit time.Duration, what string, heal func(), f func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(limit):
		t.Errorf("%s still blocked %v after it began", what, limit)
		heal()
		select {
		case err := <-done:
			t.Logf("%s returned %v after it began: %v", what, time.Since(start).Round(time.Millisecond), err)
			return err, time.Since(start)
		case <-time.After(40 * time.Second):
			t.Fatalf("%s still blocked 40s after it began", what)
			return nil, 0
		}
	}
}

// A re-entry waits for the hold's lock (held by an earlier call through the
// hold whose reply is slow) only as long as its context lasts.
func TestReentryWaitsForTheHoldWithinItsContext(t *testing.T) {
	bg := context.Background()
	rows := []struct {
		name string
		// hold takes the hold; busy keeps the hold's lock for about 2s
		// through hook, returning once it is kept; enter re-enters.
		hold  func(t *testing.T, c *Client) context.Context
		busy  func(t *testing.T, c *Client, hook *faultproxy.Hook, hctx context.Context)
		enter func(c *Client, ctx context.Context) error
	}{{
		name: "Mutex",
		hold: func(t *testing.T, c *Client) context.Context {
			hctx, err := c.Mutex("busy").Lock(bg)
			require.NoError(t, err)
			return hctx
		},
		busy: func(t *testing.T, c *Client, hook *faultproxy.Hook, hctx context.Context) {
			// An earlier re-entry leaves; its reply is 2s away.
			hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1, Action: faultproxy.DelayReply(2 * time.Second)})
			_, err := c.Mutex("busy").TryLockFor(hctx, 50*time.Millisecond)
			require.ErrorIs(t, err, ErrNotAcquired)
		},
		enter: func(c *Client, ctx context.Context) error { _, err := c.Mutex("busy").Lock(ctx); return err },
	}, {
		name: "Semaphore",
		hold: func(t *testing.T, c *Client) context.Context {
			s := c.Semaphore("busy")
			require.NoError(t, s.SetPermits(bg, 5))
			hctx, err := s.Acquire(bg, 1)
			require.NoError(t, err)
			return hctx
		},
		busy: func(t *testing.T, c *Client, hook *faultproxy.Hook, hctx context.Context) {
			hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemAcquire.Script), Times: 1, Action: faultproxy.DelayReply(2 * time.Second)})
			_, err := c.Semaphore("busy").TryAcquireFor(hctx, 1, 50*time.Millisecond)
			require.ErrorIs(t, err, ErrNotAcquired)
		},
		enter: func(c *Client, ctx context.Context) error { _, err := c.Semaphore("busy").Acquire(ctx, 1); return err },
	}, {
		name: "MultiLock",
		hold: func(t *testing.T, c *Client) context.Context {
			m := c.MultiLock([]string{"busy:a", "busy:b"})
			hctx, err := m.Lock(bg)
			require.NoError(t, err)
			_, err = m.Lock(hctx)
			require.NoError(t, err)
			return hctx
		},
		busy: func(t *testing.T, c *Client, hook *faultproxy.Hook, hctx context.Context) {
			// A release that is not the last, whose reply is 2s away.
			slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.MultiUnlock.Script), Times: 1, Action: faultproxy.DelayReply(2 * time.Second)})
			go func() { assert.NoError(t, c.MultiLock([]string{"busy:a", "busy:b"}).Unlock(hctx)) }()
			eventually(t, time.Second, "the release on its way", func() bool { return slow.Fired() == 1 })
		},
		enter: func(c *Client, ctx context.Context) error {
			_, err := c.MultiLock([]string{"busy:a", "busy:b"}).Lock(ctx)
			return err
		},
	}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel() // its own servers, mostly waiting
			e := realEnv(t)
			rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
			c := newClient(t, rdb)
			hctx := row.hold(t, c)
			row.busy(t, c, hook, hctx)

			ctx, cancel := context.WithTimeout(hctx, 200*time.Millisecond)
			defer cancel()
			err, took := timed(t, 5*time.Second, "the re-entry", func() {}, func() error { return row.enter(c, ctx) })
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, took, 900*time.Millisecond, "the re-entry returned %v after it began, its context lasted 200ms", took)
			require.NoError(t, context.Cause(hctx), "the hold is live")
			time.Sleep(2 * time.Second) // the slow reply has come
		})
	}
}

// Adding permits through a hold that is lost while the script is on its
// way fails with ErrLeaseLost, as a Mutex re-entry does, rather than
// returning nil with a context already cancelled.
func TestSemaphoreAddToHoldLostInFlight(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second})
	c := newClient(t, rdb)
	bg := context.Background()
	const lease = 400 * time.Millisecond
	s := c.Semaphore("lost-sem", WithLease(lease))
	require.NoError(t, s.SetPermits(bg, 3))
	hctx, err := s.Acquire(bg, 1)
	require.NoError(t, err)

	// The script runs at once; its reply comes after the hold's deadline.
	hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemAcquire.Script), Times: 1, Action: faultproxy.DelayReply(2 * lease)})
	actx, err := s.Acquire(context.WithoutCancel(hctx), 1) // a context that outlives the hold
	require.ErrorIs(t, context.Cause(hctx), ErrLeaseLost, "the hold was lost meanwhile")
	if assert.Error(t, err, "added to a hold that was lost") {
		assert.ErrorIs(t, err, ErrLeaseLost)
		assert.ErrorIs(t, err, ErrNotHeld)
	} else {
		t.Logf("Acquire returned a context whose Err is %v", actx.Err())
	}
	eventually(t, 3*time.Second, "every permit free again", func() bool {
		n, err := s.Available(bg)
		return err == nil && n == 3
	})
}
