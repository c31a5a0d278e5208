package redisync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/lua"
)

// Calls over a link that has gone silent, or that is slow or reset: every
// call returns within its context or its documented bound, and a caller
// that leaves early leaves behind no bookkeeping that assumes its call
// has finished.

// silentRDB returns a go-redis client that reaches addr through a fault
// proxy, with go-redis timeouts far longer than the tests (30s), so that
// only redisync's own bounds can end a call while the proxy is silent;
// tune, if given, changes its options.
func silentRDB(t *testing.T, addr string, tune ...func(*redis.Options)) (*redis.Client, *faultproxy.Proxy) {
	p := faultproxy.New(t, addr)
	opt := &redis.Options{Addr: p.Addr(), DialTimeout: time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	for _, f := range tune {
		f(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, p
}

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

// An Unlock (and Close) over a silent link returns, with an error, within
// holds.ReleaseTimeout: a deferred Unlock must not hold its caller hostage for
// as long as the link is silent. Once the link heals, the lock is freed
// (the release retried in the background); a release that was not the
// last one is counted once its reply comes, so the next Unlock is the last.
func TestSilentReleaseReturnsWithinItsBound(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const limit = holds.ReleaseTimeout + 2*time.Second
	bg := context.Background()
	var waiter <-chan faultLockResult // the local waiter of the handover row
	rows := []struct {
		name string
		// setup takes a hold of the Mutex "silent" (nil: Lock once);
		// release runs on it with the link silent, and fails unless
		// quiet; after runs once the link has healed.
		setup   func(t *testing.T, c *Client) context.Context
		release func(c *Client, hctx context.Context) error
		quiet   bool
		after   func(t *testing.T, c *Client, hctx context.Context)
	}{{
		name: "Unlock",
		release: func(c *Client, hctx context.Context) error {
			return c.Mutex("silent").Unlock(hctx)
		},
	}, {
		name: "Unlock of a re-entered hold",
		setup: func(t *testing.T, c *Client) context.Context {
			m := c.Mutex("silent")
			hctx, err := m.Lock(bg)
			require.NoError(t, err)
			_, err = m.Lock(hctx)
			require.NoError(t, err)
			return hctx
		},
		release: func(c *Client, hctx context.Context) error {
			return c.Mutex("silent").Unlock(hctx)
		},
		after: func(t *testing.T, c *Client, hctx context.Context) {
			// The abandoned release ran once the link healed, and was
			// counted: this Unlock is the last one.
			require.NoError(t, c.Mutex("silent").Unlock(hctx))
		},
	}, {
		name: "Unlock handing over to a local waiter",
		setup: func(t *testing.T, c *Client) context.Context {
			c.scriptHandoff = true // by the handoff script (in memory, nothing is sent)
			m := c.Mutex("silent")
			hctx, err := m.Lock(bg)
			require.NoError(t, err)
			waiter = idleWaiter(t, bg, c, m)
			return hctx
		},
		release: func(c *Client, hctx context.Context) error {
			return c.Mutex("silent").Unlock(hctx)
		},
		after: func(t *testing.T, c *Client, hctx context.Context) {
			select {
			case r := <-waiter:
				require.NoError(t, r.err, "the waiter got the lock once the link healed")
				require.NoError(t, c.Mutex("silent").Unlock(r.hctx))
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not get the lock once the link healed")
			}
		},
	}, {
		name: "Close",
		release: func(c *Client, hctx context.Context) error {
			return c.Close()
		},
		quiet: true, // Close releases best-effort
	}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel() // its own servers, mostly waiting
			e := realEnv(t)
			rdb, p := silentRDB(t, e.addr)
			c := newClient(t, rdb)
			var hctx context.Context
			if row.setup != nil {
				hctx = row.setup(t, c)
			} else {
				var err error
				hctx, err = c.Mutex("silent").Lock(bg)
				require.NoError(t, err)
			}

			p.Blackhole(true)
			err, took := timed(t, limit, row.name, func() { healProxy(p) }, func() error { return row.release(c, hctx) })
			healProxy(p)
			t.Logf("%s returned after %v: %v", row.name, took.Round(time.Millisecond), err)
			if !row.quiet {
				require.Error(t, err, "the link was silent")
			}

			if row.after != nil {
				row.after(t, c, hctx)
			}
			if row.quiet {
				// Close releases best-effort, within its 5s: its release,
				// written on the silent link and lost there, is not sent
				// again once the Client is closed (redisync never writes a
				// call twice itself); the lease frees the lock.
				return
			}
			direct := e.rdb(t)
			eventually(t, 3*time.Second, "the lock freed once the link healed", func() bool {
				n, err := direct.Exists(bg, "silent").Result()
				return err == nil && n == 0
			})
		})
	}
}

// FairMutex and RWMutex waits end at their context when the waiter's link
// is silent, as Mutex and Semaphore waits do: the removal of the queue
// entry goes on in the background, and leaves nothing in Redis once the
// link works, even when go-redis does not send it again after the
// connection it went out on was reset.
func TestSilentQueueWaitsEndAtTheirContext(t *testing.T) {
	const allowance = 150 * time.Millisecond // cleanupGrace was 200ms
	bg := context.Background()
	rows := []struct {
		name   string
		lock   func(c *Client, ctx context.Context, opts ...anyOpt) (context.Context, error)
		unlock func(c *Client, ctx context.Context) error
	}{{
		name: "FairMutex",
		lock: func(c *Client, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.FairMutex("q", as[FairOption](opts)...).Lock(ctx)
		},
		unlock: func(c *Client, ctx context.Context) error { return c.FairMutex("q").Unlock(ctx) },
	}, {
		name: "RWMutex",
		lock: func(c *Client, ctx context.Context, opts ...anyOpt) (context.Context, error) {
			return c.RWMutex("q", as[RWOption](opts)...).Lock(ctx)
		},
		unlock: func(c *Client, ctx context.Context) error { return c.RWMutex("q").Unlock(ctx) },
	}}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel() // its own servers, mostly waiting
			e := realEnv(t)
			holder := e.client(t)
			hctx, err := row.lock(holder, bg)
			require.NoError(t, err)
			rdb, p := silentRDB(t, e.addr, func(o *redis.Options) { o.MaxRetries = -1 })
			var done atomic.Int64 // scripts the waiter's client has finished
			gate(rdb, doneHook{&done})
			c := newClient(t, rdb)

			for range 3 {
				ctx, cancel := context.WithCancel(bg)
				errc := make(chan error, 1)
				before := done.Load()
				go func() {
					// A long waiter timeout: only the removal empties the queue.
					_, err := row.lock(c, ctx, WithWaiterTimeout(20*time.Second))
					errc <- err
				}()
				eventually(t, 5*time.Second, "the waiter waiting", func() bool {
					return done.Load() >= before+2 && semWaiters(c) == 1
				})
				p.Blackhole(true)
				cancel()
				err, took := timed(t, 10*time.Second, "the wait", func() { healProxy(p) }, func() error { return <-errc })
				healProxy(p)
				assert.ErrorIs(t, err, context.Canceled)
				assert.Less(t, took, allowance, "the wait ended %v after its context", took)
			}

			require.NoError(t, row.unlock(holder, hctx))
			var left []string
			deadline := time.Now().Add(3 * time.Second)
			for left = e.keys(t); len(left) > 0 && time.Now().Before(deadline); left = e.keys(t) {
				time.Sleep(10 * time.Millisecond)
			}
			assert.Empty(t, left, "left in Redis once the link works")
		})
	}
}

// Unlock of a hold that already ended with its context returns nil, as
// Mutex.Unlock's doc promises, even when the release it sends again in the
// background (to make sure) meets a reset connection.
func TestUnlockAfterContextEndedOverResets(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: time.Second})
	c := newClient(t, rdb)
	bg := context.Background()
	m := c.Mutex("reset")
	direct := e.rdb(t)
	exists := func() bool { return direct.Exists(bg, "reset").Val() == 1 }
	ctx, cancel := context.WithCancel(bg)
	_, err := m.Lock(ctx)
	require.NoError(t, err)
	cancel()
	eventually(t, 5*time.Second, "released with its context", func() bool { return !exists() }) // the script is cached

	ctx, cancel = context.WithCancel(bg)
	hctx, err := m.Lock(ctx)
	require.NoError(t, err)
	// Every release's reply is lost, as on a connection reset after the
	// script ran.
	lost := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Drop.Script), Action: faultproxy.LoseReply()})
	cancel()
	eventually(t, 5*time.Second, "released with its context", func() bool { return lost.Fired() >= 1 && !exists() })
	require.NoError(t, m.Unlock(hctx))
	eventually(t, 5*time.Second, "Unlock made sure Redis does not keep it, in the background", func() bool { return lost.Fired() >= 2 })
	assert.False(t, exists())
}

// A re-entry waits for the hold's lock (held by an earlier call through the
// hold whose reply is slow) only as long as its context lasts.
func TestReentryWaitsForTheHoldWithinItsContext(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
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
			slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1, Action: faultproxy.DelayReply(2 * time.Second)})
			_, err := c.Mutex("busy").TryLockFor(hctx, 50*time.Millisecond)
			require.ErrorIs(t, err, ErrNotAcquired)
			require.Equal(t, 1, slow.Fired(), "the re-entry's reply delayed")
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
			slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemAcquire.Script), Times: 1, Action: faultproxy.DelayReply(2 * time.Second)})
			_, err := c.Semaphore("busy").TryAcquireFor(hctx, 1, 50*time.Millisecond)
			require.ErrorIs(t, err, ErrNotAcquired)
			require.Equal(t, 1, slow.Fired(), "the re-entry's reply delayed")
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
			lag := watchLag(t)
			err, took := timed(t, 5*time.Second, "the re-entry", func() {}, func() error { return row.enter(c, ctx) })
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, took, 900*time.Millisecond+lag.Slack(),
				"the re-entry returned %v after it began, its context lasted 200ms (the machine's worst delay meanwhile: %v)", took, lag.Worst())
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
	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemAcquire.Script), Times: 1, Action: faultproxy.DelayReply(2 * lease)})
	actx, err := s.Acquire(context.WithoutCancel(hctx), 1) // a context that outlives the hold
	require.Equal(t, 1, slow.Fired(), "the addition's reply delayed")
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

// A handoff whose releaser left (no reply within holds.ReleaseTimeout) can still
// run later: what it grants then is given back, and its receiver, which
// waits on as a new owner, does not adopt it. Adopted, the grant outlived
// the receiver's Unlock and kept the lock for a whole lease.
func TestAbandonedHandoffGrantIsGivenBack(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 30 * time.Second})
	c := newClient(t, rdb)
	c.scriptHandoff = true // the handoff script is what is abandoned
	bg := context.Background()
	m := c.Mutex("abandoned")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := idleWaiter(t, bg, c, m)

	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script), Times: 1, Action: faultproxy.DelayBefore(holds.ReleaseTimeout + time.Second)})
	start := time.Now()
	require.Error(t, m.Unlock(hctx), "no reply within holds.ReleaseTimeout")
	require.Equal(t, 1, slow.Fired())
	select {
	case r := <-w:
		require.NoError(t, r.err)
		require.NoError(t, m.Unlock(r.hctx))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	time.Sleep(time.Until(start.Add(holds.ReleaseTimeout + 1500*time.Millisecond))) // the handoff has run
	eventually(t, 2*time.Second, "the late handoff's grant given back", func() bool {
		n, err := e.rdb(t).Exists(bg, "abandoned").Result()
		return err == nil && n == 0
	})
}
