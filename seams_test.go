package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// Where two features meet: the breaks of a review (issue 18), each shown
// against a real redis-server.

// A downgrade's read hold taken with a context derived from the write
// hold's ends when that context is cancelled, even when the write Unlock
// follows at once (the order deferred calls run in): it must not be taken
// for a context that ended with the write hold.
func TestDowngradeCancelThenUnlock(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	c, other := e.client(t), e.client(t)
	for i := range 8 {
		name := fmt.Sprintf("seam:down:%d", i)
		rw := c.RWMutex(name)
		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		dctx, cancel := context.WithCancel(wctx)
		rctx, err := rw.RLock(dctx)
		require.NoError(t, err)
		lag := watchLag(t)
		cancelled := time.Now()
		cancel()
		require.NoError(t, rw.Unlock(wctx))

		if _, ok := recvWithin(lag, cancelled, 300*time.Millisecond, rctx.Done()); !ok {
			t.Fatalf("run %d: the read hold is live %v after the context it was taken with was cancelled (the machine's worst delay meanwhile: %v)",
				i, time.Since(cancelled), lag.Worst())
		}
		lag.Stop()
		octx, err := other.RWMutex(name).TryLockFor(bg, 2*time.Second)
		require.NoError(t, err, "run %d: another client's writer gets the lock", i)
		require.NoError(t, other.RWMutex(name).Unlock(octx))
	}
}

// TryLockFor through a hold whose re-entry answers after the wait bound,
// while the caller's context is live, reports ErrNotAcquired (the bound
// ran out), not the bound's context.DeadlineExceeded; and the late
// re-entry is taken back.
func TestReentryAfterWaitBoundIsNotAcquired(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	kinds := []struct {
		name    string
		script  *lua.Script
		lock    func(ctx context.Context) (context.Context, error)
		lockFor func(ctx context.Context, d time.Duration) (context.Context, error)
		count   func(ctx context.Context) (int, error)
		unlock  func(ctx context.Context) error
	}{
		{"mutex", lua.Lock, c.Mutex("seam:re:m").Lock, c.Mutex("seam:re:m").TryLockFor, c.Mutex("seam:re:m").HoldCount, c.Mutex("seam:re:m").Unlock},
		{"fair", lua.FairLock, c.FairMutex("seam:re:f").Lock, c.FairMutex("seam:re:f").TryLockFor, c.FairMutex("seam:re:f").HoldCount, c.FairMutex("seam:re:f").Unlock},
		{"rw write", lua.RWLock, c.RWMutex("seam:re:rw").Lock, c.RWMutex("seam:re:rw").TryLockFor, c.RWMutex("seam:re:rw").HoldCount, c.RWMutex("seam:re:rw").Unlock},
		{"rw read", lua.RWRLock, c.RWMutex("seam:re:rr").RLock, c.RWMutex("seam:re:rr").TryRLockFor, c.RWMutex("seam:re:rr").RHoldCount, c.RWMutex("seam:re:rr").RUnlock},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			lctx, err := k.lock(bg)
			require.NoError(t, err)
			// The reply comes late by a second: a call that waited for it
			// takes longer than that, one that ends at its bound does not
			// (an order, whatever delays a loaded machine adds to the call).
			const late = time.Second
			slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(k.script.Script), Times: 1,
				Action: faultproxy.DelayReply(late)})
			start := time.Now()
			_, err = k.lockFor(lctx, 50*time.Millisecond)
			took := time.Since(start)
			require.Equal(t, 1, slow.Fired())
			require.ErrorIs(t, err, ErrNotAcquired, "the wait bound ran out while the caller's context is live")
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, took, late, "the call ends at its bound, before the late reply")
			require.NoError(t, lctx.Err())
			eventually(t, 5*time.Second, "the late re-entry taken back", func() bool {
				n, err := k.count(lctx)
				return err == nil && n == 1
			})
			require.NoError(t, k.unlock(lctx))
		})
	}
}

// A Semaphore re-entry that the replicas did not acknowledge is taken back
// and announced: a waiter of another client gets the permit at once, not
// at its wait bound.
func TestReplicaAckSemaphoreReentryUndoWakes(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	bg := context.Background()
	const timeout = 300 * time.Millisecond
	a := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, timeout))
	b := e.client(t)
	sa, sb := a.Semaphore("seam:sem"), b.Semaphore("seam:sem")
	require.NoError(t, sa.SetPermits(bg, 2))
	actx, err := sa.Acquire(bg, 1)
	require.NoError(t, err)

	replica.Pause()
	t.Cleanup(replica.Resume)
	reentered := make(chan error, 1)
	go func() { _, err := sa.Acquire(actx, 1); reentered <- err }()
	time.Sleep(timeout / 3) // A's script ran: both permits are in use
	type result struct {
		ctx context.Context
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		ctx, err := sb.Acquire(bg, 1)
		got <- result{ctx, err, time.Now()}
	}()
	lag := watchLag(t)
	require.ErrorIs(t, <-reentered, ErrNotReplicated)
	failed := time.Now()
	select {
	case r := <-got:
		require.NoError(t, r.err)
		assert.Less(t, r.at.Sub(failed), 500*time.Millisecond+lag.Slack(), "the waiter gets the permit given back at once (the machine's worst delay meanwhile: %v)", lag.Worst())
		require.NoError(t, sb.Release(r.ctx, 1))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never got the permit")
	}
	require.NoError(t, sa.Release(actx, 1))
}

// errLoading is Redis's reply while it loads its dataset after a restart.
type errLoading struct{}

func (errLoading) Error() string { return "LOADING Redis is loading the dataset in memory" }
func (errLoading) RedisError()   {}

// A waiting Lock rides out LOADING (Redis restarting with its data) and
// the other replies that say Redis is not ready yet; so does a TryLock,
// within its context's deadline (the transport sends the script again),
// and it reports a LOADING that outlasts that deadline.
func TestWaitRidesOutLoading(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	var re redis.Error
	require.True(t, errors.As(error(errLoading{}), &re), "the test's LOADING is a Redis error reply")

	m := c.Mutex("seam:loading")
	rule := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1, Action: faultproxy.Fail(errLoading{})})
	tctx, err := m.TryLock(bg)
	require.NoError(t, err, "a TryLock rides out a short LOADING")
	assert.Equal(t, 1, rule.Fired())
	require.NoError(t, m.Unlock(tctx))
	rule = hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Lock.Script), Action: faultproxy.Fail(errLoading{})})
	short, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	_, err = m.TryLock(short)
	cancel()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "LOADING", "a LOADING past the TryLock's deadline is reported")
	rule.Remove()

	f := c.FairMutex("seam:loading:f")
	s := c.Semaphore("seam:loading:s")
	require.NoError(t, s.SetPermits(bg, 1))
	rw := c.RWMutex("seam:loading:rw")
	for _, k := range []struct {
		name   string
		script *lua.Script
		lock   func(context.Context) (context.Context, error)
		unlock func(context.Context) error
	}{
		{"mutex", lua.Lock, m.Lock, m.Unlock},
		{"fair", lua.FairLock, f.Lock, f.Unlock},
		{"rw", lua.RWLock, rw.Lock, rw.Unlock},
		{"semaphore", lua.SemAcquire, func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 1) },
			func(ctx context.Context) error { return s.Release(ctx, 1) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			rule := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(k.script.Script), Times: 3, Action: faultproxy.Fail(errLoading{})})
			defer rule.Remove()
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			lctx, err := k.lock(ctx)
			require.NoError(t, err, "a waiting acquisition rides out LOADING")
			assert.Equal(t, 3, rule.Fired())
			rule.Remove()
			if k.name != "semaphore" {
				// A re-entry by a waiting call rides it out too.
				again := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(k.script.Script), Times: 2, Action: faultproxy.Fail(errLoading{})})
				rctx, err := k.lock(lctx)
				require.NoError(t, err, "a re-entry rides out LOADING")
				assert.Equal(t, 2, again.Fired())
				require.NoError(t, k.unlock(rctx))
			}
			require.NoError(t, k.unlock(lctx))
		})
	}
}

// No caller waits for the detection of the pub/sub mode: a Cluster client
// whose New could not tell the mode (PubSubAuto still), with one master
// that does not serve the lock silent, locks and unlocks a free lock
// within the caller's deadline.
func TestPubSubDetectionNotOnCallersPath(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistestCluster(t)
	bg := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	hook := faultproxy.NewHook()
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
	refuse := hook.OnCommand(faultproxy.CommandRule{Name: "pubsub", Action: faultproxy.Fail(nil)})
	c := newClient(t, cc)
	require.Equal(t, PubSubAuto, c.PubSub(), "New could not tell the mode")
	require.NotZero(t, refuse.Fired())
	// go-redis learns the commands' key positions once, from any node:
	// before a node is stopped.
	require.NoError(t, cc.Exists(bg, "warm-up").Err())
	refuse.Remove()
	time.Sleep(notify.DetectEvery + 100*time.Millisecond) // detection may be tried again

	const name = "seam:detect"
	node, err := cc.MasterForKey(bg, name)
	require.NoError(t, err)
	for _, m := range cl.Masters {
		if m.Addr() != node.Options().Addr {
			m.Pause()
			t.Cleanup(m.Resume)
			break
		}
	}
	mu := c.Mutex(name)
	// Half the detection's bound on a silent node (notify.DetectTimeout):
	// a call that waited for it fails; 300ms was once missed by 29ms on a
	// loaded machine.
	// The machine's scheduling delay meanwhile is added to the bound;
	// the context is only a liveness bound.
	bound := notify.DetectTimeout / 2
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	lctx, err := mu.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, mu.Unlock(lctx))
	assert.Less(t, time.Since(start), bound+lag.Slack(), "Lock and Unlock of a free lock on a live master (the machine's worst delay meanwhile: %v)", lag.Worst())
}

// With WithReplicaAck on a Cluster, a graceful failover keeps the holds it
// was meant to keep: renewals and acquisitions that meet MOVED follow the
// slot to its new master (the slot map is reloaded), a hold is not lost,
// a TryLock on the moved shard works, and a waiting Lock does not take
// MOVED for a refusal. (Classic pub/sub: a sharded subscription would
// reload the slot map itself when Redis moves it.)
func TestReplicaAckClusterFailoverKeepsHolds(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	bg := context.Background()
	ackClient := func() *Client {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = rdb.Close() })
		return newClient(t, rdb, WithWatchdogTimeout(3*time.Second), WithReplicaAck(1, 300*time.Millisecond), WithPubSub(PubSubClassic))
	}
	c, w := ackClient(), ackClient() // a holder, and a client that only waits
	other := newClient(t, rc.Client(t), WithPubSub(PubSubClassic))
	from := rc.Masters[0]
	cc := rc.Client(t)
	held, waited, free := nameOn(t, cc, from, "ackfo-held"), nameOn(t, cc, from, "ackfo-waited"), nameOn(t, cc, from, "ackfo-free")

	hctx, err := c.Mutex(held).Lock(bg)
	require.NoError(t, err)
	octx, err := other.Mutex(waited).Lock(bg)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 20*time.Second)
		defer cancel()
		wctx, err := w.Mutex(waited).Lock(ctx)
		if err == nil {
			err = w.Mutex(waited).Unlock(wctx)
		}
		got <- err
	}()
	eventually(t, 2*time.Second, "the waiter waiting", func() bool { return localWaiters(w, w.Mutex(waited).channel) == 1 })

	rc.Failover(t, 0, false)
	require.NoError(t, other.Mutex(waited).Unlock(octx))
	select {
	case err := <-got:
		require.NoError(t, err, "the waiting Lock gets the lock on the shard's new master")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting Lock was not woken")
	}
	// Past a whole lease after the failover: renewals met MOVED.
	time.Sleep(3 * time.Second)
	require.NoError(t, hctx.Err(), "the hold survives a failover that kept its key (cause %v)", context.Cause(hctx))
	fctx, err := c.Mutex(free).TryLock(bg)
	require.NoError(t, err, "a TryLock on the moved shard")
	require.NoError(t, c.Mutex(free).Unlock(fctx))
	require.NoError(t, c.Mutex(held).Unlock(hctx))
}

// Waits that start around a killed subscription connection do not sleep
// out a lease: whatever the order of the kill, the SUBSCRIBE that follows
// and an unlock, a wait whose channel was (re)confirmed looks again. Four
// clients of four goroutines take turns on eight locks with holds under a
// millisecond while the pub/sub connections are killed every few hundred
// milliseconds; no Lock waits two seconds (plus what the machine delayed
// goroutines by). A lost wake-up costs a wait's bound, a third of the 30s
// lease: well apart from the waits behind other holders, which a busy
// machine stretches past a second. A wait cut by the run's end counts
// for as long as it waited.
func TestPubSubKillLosesNoWakeUp(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	admin := e.rdb(t)
	const clients, perClient, locks = 4, 4, 8
	const lease = 30 * time.Second
	run := 6 * time.Second
	if testing.Short() {
		run = 3 * time.Second
	}
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = e.client(t, WithWatchdogTimeout(lease))
	}
	ctx, stop := context.WithTimeout(bg, run)
	defer stop()
	var mu sync.Mutex
	var worst time.Duration
	var worstAt time.Time
	var killed []time.Time
	var wg sync.WaitGroup
	for i := range clients * perClient {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i%clients]
			for n := i; ctx.Err() == nil; n++ {
				m := c.Mutex(fmt.Sprintf("seam:kill:%d", n%locks))
				start := time.Now()
				lctx, err := m.Lock(ctx)
				d := time.Since(start)
				mu.Lock()
				if d > worst {
					worst, worstAt = d, start
				}
				mu.Unlock()
				if err != nil {
					continue // the run ended
				}
				time.Sleep(time.Duration(n%3) * 300 * time.Microsecond)
				_ = m.Unlock(lctx)
			}
		}()
	}
	lag := watchLag(t)
	kills := 0
	for ctx.Err() == nil {
		time.Sleep(time.Duration(150+kills*37%250) * time.Millisecond)
		if n, err := admin.ClientKillByFilter(bg, "TYPE", "pubsub").Result(); err == nil && n > 0 {
			kills++
			mu.Lock()
			killed = append(killed, time.Now())
			mu.Unlock()
		}
	}
	wg.Wait()
	since := "before the first kill"
	for _, k := range killed {
		if k.Before(worstAt) {
			since = fmt.Sprintf("%v after a kill", worstAt.Sub(k))
		}
	}
	t.Logf("%d kills; longest wait %v, started %s; the machine's worst delay %v", kills, worst, since, lag.Worst())
	require.NotZero(t, kills)
	assert.Less(t, worst, 2*time.Second+lag.Slack(), "a Lock waited for its bound: a wake-up was lost around a kill")
}

// errAsk is a Cluster's ASK reply, as the transport gets it when go-redis's
// cluster pipeline gave up following it (MaxRedirects).
type errAsk struct{}

func (errAsk) Error() string { return "ASK 866 127.0.0.1:1" }
func (errAsk) RedisError()   {}

// A waiting Lock whose attempts meet a redirect up to its deadline (a slot
// moving) ends with its context's error, as a wait does, not with the
// redirect; the redirect is only named as what the last attempt met.
func TestWaitRidesOutRedirects(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	asks := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Lock.Script), Action: faultproxy.Fail(errAsk{})})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := c.Mutex("seam:ask").Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Greater(t, asks.Fired(), 1, "the attempts redirected")
	assert.True(t, strings.HasPrefix(err.Error(), `redisync: lock "seam:ask": context deadline exceeded (the last attempt`), err.Error())
}

// A wait whose context ends while an attempt is being redirected (the
// attempt then never written again) ends as a wait ended between attempts
// does: with its context's error, the redirect named as what the last
// attempt met, not with the transport's "not sent".
func TestWaitCutWhileRedirected(t *testing.T) {
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen atomic.Int32
	runs := faultproxy.RunsScript(lua.Lock.Script)
	hook.OnCommand(faultproxy.CommandRule{Args: func(args []any) bool {
		if !runs(args) {
			return false
		}
		if seen.Add(1) == 3 {
			cancel() // the caller leaves while this attempt is redirected
		}
		return true
	}, Action: faultproxy.Fail(errAsk{})})
	_, err := c.Mutex("seam:cut").Lock(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, strings.HasPrefix(err.Error(), `redisync: lock "seam:cut": context canceled (the last attempt failed: ASK`), err.Error())
	assert.NotContains(t, err.Error(), "not sent")
}
