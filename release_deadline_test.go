package redisync

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/lua"
)

// A request's deadline bounds the release of what the request took: a
// hold taken with a context that ends (a request's deadline) while its
// release waits on a link gone silent, or on a Redis that refuses
// connections, returns nil by that end (the hold ended with its context,
// and was the caller's until then), not after the release's own 5s bound;
// the release goes on in the background, and once Redis answers again the
// lock is free for another client well before its 30s lease ends.

// faultLink is how a release's link fails.
type faultLink struct {
	name string
	on   func(l *faultyLink)
}

var faultLinks = []faultLink{
	{"silent", func(l *faultyLink) { l.p.Blackhole(true) }},
	{"refused", func(l *faultyLink) {
		l.refuse.Store(true)
		l.p.CutAll()
		// The cut reaches the client's end in a moment: a release written
		// before it does (seen once on a loaded CI machine) was written and
		// then reset, which is "written, no reply" (it may have run, as far
		// as any client can tell), not the refusal this case is about.
		time.Sleep(100 * time.Millisecond)
	}},
}

// faultyLink is a go-redis client that reaches Redis through a fault
// proxy, with go-redis timeouts longer than the tests (30s), which can
// also refuse connections: while refuse is set, it dials a port where
// nothing listens (a real ECONNREFUSED).
type faultyLink struct {
	rdb    *redis.Client
	p      *faultproxy.Proxy
	refuse atomic.Bool
}

func newFaultyLink(t *testing.T, addr string, tune ...func(*redis.Options)) *faultyLink {
	l := &faultyLink{p: faultproxy.New(t, addr)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())
	var d net.Dialer
	opt := &redis.Options{Addr: l.p.Addr(), DialTimeout: time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if l.refuse.Load() {
				addr = closed
			}
			return d.DialContext(ctx, network, addr)
		}}
	for _, f := range tune {
		f(opt)
	}
	l.rdb = redis.NewClient(opt)
	t.Cleanup(func() { _ = l.rdb.Close() })
	return l
}

// heal makes the link work again.
func (l *faultyLink) heal() {
	l.refuse.Store(false)
	healProxy(l.p)
}

// releaseKind is one kind of release, with how to take what it releases.
type releaseKind struct {
	name    string                                     // the release
	taking  string                                     // the acquisition
	setup   func(t *testing.T, c *Client, name string) // before the first acquire (nil: nothing)
	acquire func(c *Client, ctx context.Context, name string) (context.Context, error)
	release func(c *Client, hctx context.Context, name string) error
}

var releaseKinds = []releaseKind{{
	name: "Mutex.Unlock", taking: "Mutex.Lock",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.Mutex(name).Lock(ctx)
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.Mutex(name).Unlock(hctx) },
}, {
	name: "FairMutex.Unlock", taking: "FairMutex.Lock",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.FairMutex(name).Lock(ctx)
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.FairMutex(name).Unlock(hctx) },
}, {
	name: "RWMutex.RUnlock", taking: "RWMutex.RLock",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.RWMutex(name).RLock(ctx)
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.RWMutex(name).RUnlock(hctx) },
}, {
	name: "RWMutex.Unlock", taking: "RWMutex.Lock",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.RWMutex(name).Lock(ctx)
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.RWMutex(name).Unlock(hctx) },
}, {
	name: "Semaphore.Release", taking: "Semaphore.Acquire",
	setup: func(t *testing.T, c *Client, name string) {
		require.NoError(t, c.Semaphore(name).SetPermits(context.Background(), 1))
	},
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.Semaphore(name).Acquire(ctx, 1)
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.Semaphore(name).Release(hctx, 1) },
}, {
	name: "Election.Resign", taking: "Election.Campaign",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.Election(name).Campaign(ctx, "v")
	},
	release: func(c *Client, hctx context.Context, name string) error { return c.Election(name).Resign(hctx) },
}, {
	name: "MultiLock.Unlock", taking: "MultiLock.Lock",
	acquire: func(c *Client, ctx context.Context, name string) (context.Context, error) {
		return c.MultiLock([]string{name + ":a", name + ":b"}).Lock(ctx)
	},
	release: func(c *Client, hctx context.Context, name string) error {
		return c.MultiLock([]string{name + ":a", name + ":b"}).Unlock(hctx)
	},
}}

func TestReleaseReturnsByTheEndOfTheHoldsContext(t *testing.T) {
	t.Parallel() // mostly waiting
	e := realEnv(t)
	const request = 1500 * time.Millisecond // the request's deadline, from its hold
	for i, kind := range releaseKinds {
		for _, fault := range faultLinks {
			t.Run(kind.name+"/"+fault.name, func(t *testing.T) {
				t.Parallel()
				bg := context.Background()
				name := fmt.Sprintf("reqdl:%d:%s", i, fault.name)
				l := newFaultyLink(t, e.addr)
				c := newClient(t, l.rdb)
				if kind.setup != nil {
					kind.setup(t, c, name)
				}
				parent, cancel := context.WithTimeout(bg, request)
				defer cancel()
				deadline, _ := parent.Deadline()
				hctx, err := kind.acquire(c, parent, name)
				require.NoError(t, err)

				fault.on(l)
				err, took := timed(t, holds.ReleaseTimeout+2*time.Second, kind.name, l.heal, func() error {
					return kind.release(c, hctx, name)
				})
				late := time.Since(deadline)
				t.Logf("%s returned after %v, %v after the request's deadline: %v", kind.name, took.Round(time.Millisecond), late.Round(time.Millisecond), err)
				require.NoError(t, err, "the hold ended with its context: it was the caller's until then")
				require.Less(t, late, time.Second, "the release kept its request past the request's deadline")
				l.heal()

				// Freed once Redis answers: another client takes it well
				// before the 30s lease could have freed it.
				other := e.client(t)
				octx, ocancel := context.WithTimeout(bg, 10*time.Second)
				defer ocancel()
				start := time.Now()
				hctx2, err := kind.acquire(other, octx, name)
				require.NoError(t, err, "freed in the background once Redis answers")
				t.Logf("another client took it %v after the link healed", time.Since(start).Round(time.Millisecond))
				require.NoError(t, kind.release(other, hctx2, name))
			})
		}
	}
}

// An Unlock called right after its hold ended with its context returns nil
// at once: on a silent link (it waited 5s for the hold's lock, which the
// give-back started by that end kept), and when the release it would send
// fails (it found the hold still live, before the hold's end had run, and
// reported the failed release).
func TestUnlockRightAfterItsContextEndedIsNilAtOnce(t *testing.T) {
	t.Parallel() // mostly waiting
	e := realEnv(t)
	bg := context.Background()
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		l := newFaultyLink(t, e.addr)
		c := newClient(t, l.rdb)
		lag := watchLag(t)
		for i := range 3 {
			m := c.Mutex(fmt.Sprintf("ended:silent:%d", i))
			parent, cancel := context.WithCancel(bg)
			hctx, err := m.Lock(parent)
			require.NoError(t, err)
			l.p.Blackhole(true)
			cancel()
			err, took := timed(t, holds.ReleaseTimeout+2*time.Second, "Unlock", l.heal, func() error { return m.Unlock(hctx) })
			l.heal()
			require.NoError(t, err)
			// Not after the release's bound (5s on a silent link).
			require.Less(t, took, time.Second+lag.Slack(), "at once (the machine's worst delay meanwhile: %v)", lag.Worst())
		}
	})
	t.Run("resets", func(t *testing.T) {
		t.Parallel()
		rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: time.Second})
		c := newClient(t, rdb)
		// Every Unlock script fails, as on a reset connection; the
		// give-back (lua.Drop) goes through.
		resets := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Unlock.Script),
			Action: faultproxy.Fail(fmt.Errorf("read tcp: connection reset by peer"))})
		// Whether an Unlock finds its hold still live (and sends the script,
		// which fails) or ended already (and sends none: its end's
		// give-back runs) is a race with the hold's end, a goroutine's hop
		// after cancel: both must return nil at once.
		defer func() { t.Logf("%d of 20 Unlocks sent their script, which failed", resets.Fired()) }()
		lag := watchLag(t)
		for i := range 20 {
			m := c.Mutex(fmt.Sprintf("ended:reset:%d", i))
			parent, cancel := context.WithCancel(bg)
			hctx, err := m.Lock(parent)
			require.NoError(t, err)
			cancel()
			start := time.Now()
			require.NoError(t, m.Unlock(hctx), "run %d", i)
			require.Less(t, time.Since(start), time.Second+lag.Slack(), "at once (the machine's worst delay meanwhile: %v)", lag.Worst())
		}
	})
}

// The last RUnlock of a downgraded read hold waits for its reply as any
// release does: the context that hold is bound to (derived from the write
// hold's) is ended by the hold's own end, and that end is not the end of
// the context it was taken with. Once RUnlock returns nil, another writer
// takes the lock at once.
func TestDowngradedRUnlockWaitsForItsReply(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.RWRUnlock.Load(bg, rdb).Err())
	r := c.RWMutex("downgrade:reply")
	w, err := r.Lock(bg)
	require.NoError(t, err)
	rd, err := r.RLock(w)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(w))

	slow := hook.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.RWRUnlock.Script), Times: 1,
		Action: faultproxy.DelayReply(300 * time.Millisecond)})
	start := time.Now()
	require.NoError(t, r.RUnlock(rd))
	require.Equal(t, 1, slow.Fired(), "the release's reply delayed")
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "RUnlock waited for its reply")
	_, err = e.client(t).RWMutex("downgrade:reply").TryLock(bg)
	require.NoError(t, err, "free once RUnlock has returned nil")
}
