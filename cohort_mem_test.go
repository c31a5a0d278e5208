package redisync

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// Hand-over in memory (issue 25): a Mutex's last Unlock, with a goroutine
// of the same Client waiting, hands it the hold with no round trip: no
// script is sent, the Redis owner field stays as it is, the new holder's
// deadline is the lease's real one, and the watchdog goes on renewing it.
func TestMemHandoffKeepsFieldAndLease(t *testing.T) {
	e := realEnv(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	const lease = 600 * time.Millisecond
	c := newClient(t, rdb, WithWatchdogTimeout(lease))
	m := c.Mutex("mem-handoff")
	admin := e.rdb(t)
	bg := context.Background()
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	fields := admin.HGetAll(bg, m.Name()).Val()
	w := idleWaiter(t, bg, c, m)
	before := holds.Held(hctx, m.spec.Ref).Left()

	scripts := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Action: faultproxy.DelayBefore(0)})
	require.NoError(t, m.Unlock(hctx))
	got := <-w
	require.NoError(t, got.err)
	assert.Zero(t, scripts.Fired(), "a script was sent for a hand-over in memory")
	assert.Equal(t, fields, admin.HGetAll(bg, m.Name()).Val(), "the Redis owner field changed")
	nh := holds.Held(got.hctx, m.spec.Ref)
	require.NotNil(t, nh)
	assert.InDelta(t, before.Seconds(), nh.Left().Seconds(), 0.05, "the new holder's deadline is not the lease's")
	assert.Error(t, hctx.Err(), "the old hold's context is live")

	time.Sleep(2 * lease) // renewed by the watchdog meanwhile
	require.NoError(t, got.hctx.Err(), "the handed hold was not renewed")
	n, err := m.HoldCount(got.hctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	scripts.Remove()
	require.NoError(t, m.Unlock(got.hctx))
	assert.Empty(t, e.keys(t))
}

// A run of hand-overs in memory whose lock Redis loses mid-run (a key
// deleted, a ForceUnlock from another process): another client takes the
// lock at once, and the holders of the run are told at their next renewal
// (within a third of the lease), as any holder of a lock Redis lost is;
// none is handed a hold after that.
func TestMemHandoffLockLostMidRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, e *testEnv, name string)
	}{
		{"deleted", func(t *testing.T, e *testEnv, name string) {
			require.NoError(t, e.rdb(t).Del(context.Background(), name).Err())
		}},
		{"forced by another process", func(t *testing.T, e *testEnv, name string) {
			ok, err := e.client(t).Mutex(name).ForceUnlock(context.Background())
			require.NoError(t, err)
			require.True(t, ok)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // its own server, mostly waiting
			e := realEnv(t)
			const lease = 900 * time.Millisecond
			c := e.client(t, WithWatchdogTimeout(lease))
			m := c.Mutex("mem-lost")
			r := runHandoffs(t, c, m, 4)
			waitHandoffs(t, r, 20)
			tc.lose(t, e, m.Name())
			other := e.client(t).Mutex(m.Name())
			octx, err := other.TryLockFor(context.Background(), 2*time.Second)
			require.NoError(t, err, "another client could not take the lost lock")
			took := time.Now()
			// Told at the next renewal: a third of the lease, plus room.
			deadline := took.Add(lease/3 + 300*time.Millisecond)
			for time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			r.checkNoneLiveSince(t, deadline)
			require.NoError(t, other.Unlock(octx))
			r.stop()
		})
	}
}

// Close in the middle of a run: every hold of the run ends (ErrClosed),
// and the lock is freed in Redis.
func TestMemHandoffCloseMidRun(t *testing.T) {
	e := realEnv(t)
	c, err := New(e.rdb(t))
	require.NoError(t, err)
	m := c.Mutex("mem-close")
	r := runHandoffs(t, c, m, 4)
	waitHandoffs(t, r, 20)
	require.NoError(t, c.Close())
	r.stop()
	r.checkNoneLiveSince(t, time.Now())
	eventually(t, 2*time.Second, "the lock freed", func() bool { return len(e.keys(t)) == 0 })
}

// Paused past the lease (a GC pause, SIGSTOP, a suspend: here the suspend
// seam, see suspend_test.go) in the middle of a run: the holder's context
// is done at once, and no waiter is handed a hold whose deadline has
// passed: the hand-over in memory carries the lease's real deadline, and
// a grant past it is refused (the waiters then go through Redis).
func TestMemHandoffAfterPause(t *testing.T) {
	e := realEnv(t)
	const lease = 3 * time.Second
	c := e.client(t, WithWatchdogTimeout(lease))
	m := c.Mutex("mem-pause")
	r := runHandoffs(t, c, m, 4)
	waitHandoffs(t, r, 20)
	suspend(t, 2*lease)
	resumed := time.Now()
	time.Sleep(300 * time.Millisecond)
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.grants {
		if g.at.After(resumed) && g.handoff {
			// A hand-over after the pause is only right when its
			// holder's own lease was set after the pause.
			assert.False(t, g.lostAtGrant, "a hold handed over in memory after the pause was already past its deadline")
		}
	}
}

// localRun is a run of goroutines of one Client taking a Mutex in turn
// (handed over in memory between them), with what each grant saw.
type localRun struct {
	mu      sync.Mutex
	grants  []grantSeen
	holds   []context.Context // every hold context handed out
	handed  atomic.Int64
	done    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

type grantSeen struct {
	at          time.Time
	handoff     bool
	lostAtGrant bool // its context was already done when Lock returned
}

// runHandoffs starts n goroutines of c taking m in turn, holding it a
// moment each time, until stop.
func runHandoffs(t *testing.T, c *Client, m *Mutex, n int) *localRun {
	r := &localRun{done: make(chan struct{})}
	c.obs.Acquired = func(_ context.Context, ev HoldEvent) {
		if ev.Handoff {
			r.handed.Add(1)
		}
	}
	for range n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				before := r.handed.Load()
				hctx, err := m.Lock(ctx)
				if err != nil {
					cancel()
					continue // closed, or waiting for the other client
				}
				r.mu.Lock()
				r.grants = append(r.grants, grantSeen{time.Now(), r.handed.Load() > before, hctx.Err() != nil})
				r.holds = append(r.holds, hctx)
				r.mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				_ = m.Unlock(hctx)
				cancel()
			}
		}()
	}
	t.Cleanup(r.stop)
	return r
}

func (r *localRun) stop() {
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		close(r.done)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// waitHandoffs waits until the run has handed the lock over n times.
func waitHandoffs(t *testing.T, r *localRun, n int64) {
	t.Helper()
	eventually(t, 5*time.Second, "hand-overs in memory", func() bool { return r.handed.Load() >= n })
}

// checkNoneLiveSince fails if a hold the run handed out is live now and
// was granted at or before since, or was granted after since with a live
// context while it should not have been: every hold granted before since
// must be done by now.
func (r *localRun) checkNoneLiveSince(t *testing.T, since time.Time) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, hctx := range r.holds {
		if r.grants[i].at.Before(since) && hctx.Err() == nil {
			t.Errorf("a hold granted %v before the check is still live", since.Sub(r.grants[i].at))
		}
	}
}

// No hand-over in memory of a hold whose lease was set before a switch of
// the primary: taken on the old primary in its last moment, the new one
// may not have it (here: deleted, as a failover loses an unreplicated
// write). The handoff goes through Redis, which tells the releaser the
// hold was lost, and the waiter holds the lock in Redis, not in memory
// only. (Found in the failover trial: a Client handed such a hold from
// goroutine to goroutine for 100ms while another Client held the lock on
// the new primary.)
func TestMemHandoffNotAfterSwitch(t *testing.T) {
	e := realEnv(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	c := newClient(t, rdb)
	m := c.Mutex("mem-switch")
	bg := context.Background()
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := idleWaiter(t, bg, c, m)
	told := make(chan struct{}, 1)
	stop := c.tr.OnSwitch(func(transport.Switch) { told <- struct{}{} }) // after the Client's own listener
	defer stop()
	c.tr.Switched(transport.Switch{Cause: "test"})
	<-told
	// The switch moved the subscription; the waiter can be handed the
	// lock once it is confirmed on the new connection.
	eventually(t, 2*time.Second, "the waiter subscribed again", func() bool {
		return c.ps.ConfirmedOn(m.channel) && advIdleWaiters(c, m.channel) == 1
	})
	require.NoError(t, e.rdb(t).Del(bg, m.Name()).Err()) // never on the new primary

	handoffs := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script)})
	assert.ErrorIs(t, m.Unlock(hctx), ErrLeaseLost, "the hold Redis did not have was reported released")
	assert.Positive(t, handoffs.Fired(), "no handoff script: handed in memory")
	got := <-w
	require.NoError(t, got.err)
	n, err := m.HoldCount(got.hctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the waiter's hold is not in Redis")
	require.NoError(t, m.Unlock(got.hctx))
}
