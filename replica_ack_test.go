package redisync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// ackRDB is a go-redis client whose ReadTimeout leaves room for WAIT.
func ackRDB(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// ackReplica starts a replica of e's server and waits until it
// acknowledges writes: after a diskless sync, the master streams writes to
// a new replica only once that replica has sent its first ACK, up to a
// second after its link is up.
func ackReplica(t *testing.T, e *testEnv) *redistest.Server {
	t.Helper()
	replica := redistestReplica(t, e)
	waitAcked(t, e)
	return replica
}

// returnsAfterResume pauses replica, starts acquire, resumes the replica
// after a while and returns acquire's context: it fails the test unless
// acquire returned after the replica was running again.
func returnsAfterResume(t *testing.T, replica *redistest.Server, acquire func() (context.Context, error)) context.Context {
	t.Helper()
	type result struct {
		ctx context.Context
		err error
		at  time.Time
	}
	replica.Pause()
	got := make(chan result, 1)
	go func() {
		ctx, err := acquire()
		got <- result{ctx, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	resumed := time.Now()
	replica.Resume()
	select {
	case r := <-got:
		require.NoError(t, r.err)
		assert.True(t, r.at.After(resumed), "returned %v before the replica was resumed", resumed.Sub(r.at))
		return r.ctx
	case <-time.After(5 * time.Second):
		t.Fatal("the acquisition did not return after the replica was resumed")
		return nil
	}
}

// With WithReplicaAck, Lock and a re-entry return only once the replica has
// them: with the replica paused they wait for it, and right after they
// return the replica has the hash.
func TestReplicaAckLockIsOnTheReplica(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	rr := replica.Client(t)
	c := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, 3*time.Second))
	m := c.Mutex("ack")
	bg := context.Background()

	lctx := returnsAfterResume(t, replica, func() (context.Context, error) { return m.Lock(bg) })
	field := holds.Held(lctx, m.spec.Ref).Field
	got, err := rr.HGetAll(bg, "ack").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{field: "1"}, got, "the replica has the lock when Lock returns")

	returnsAfterResume(t, replica, func() (context.Context, error) { return m.Lock(lctx) })
	got, err = rr.HGetAll(bg, "ack").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{field: "2"}, got, "the replica has the re-entry when Lock returns")

	f := c.FairMutex("ack-fair")
	fctx := returnsAfterResume(t, replica, func() (context.Context, error) { return f.Lock(bg) })
	n, err := rr.Exists(bg, "ack-fair").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the replica has the fair lock when Lock returns")

	require.NoError(t, m.Unlock(lctx))
	require.NoError(t, m.Unlock(lctx))
	require.NoError(t, f.Unlock(fctx))
}

// ackFaulted starts a real server with a replica that acknowledges
// writes, and a Client on it with WithReplicaAck(1, timeout) whose
// commands the hook can delay, lose or fail.
func ackFaulted(t *testing.T, timeout time.Duration) (*testEnv, *redistest.Server, *Client, *faultproxy.Hook) {
	t.Helper()
	e := realEnv(t)
	replica := ackReplica(t, e)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	return e, replica, newClient(t, rdb, WithReplicaAck(1, timeout)), hook
}

// With the replica frozen, every kind of acquisition and re-entry fails
// with ErrNotReplicated within about the timeout, naming the lock, hands
// out no hold and leaves nothing behind on the primary.
func TestReplicaAckPausedReplicaFails(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const timeout = 200 * time.Millisecond
	e, replica, c, hook := ackFaulted(t, timeout)
	bg := context.Background()

	sem := c.Semaphore("ack-sem")
	require.NoError(t, sem.SetPermits(bg, 3))
	held := c.Mutex("ack-held")
	hctx, err := held.Lock(bg)
	require.NoError(t, err)
	sctx, err := sem.Acquire(bg, 1)
	require.NoError(t, err)
	baseline := e.keys(t)

	replica.Pause()
	t.Cleanup(replica.Resume)
	// Every give-back reaches Redis late: an undo that the error does not
	// wait for is still to come when the checks below look.
	var slow []*faultproxy.Rule
	for _, s := range []*lua.Script{lua.Unlock, lua.FairUnlock, lua.RWUnlock, lua.RWRUnlock, lua.SemRelease, lua.MultiUnlock} {
		slow = append(slow, hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(s.Script), Action: faultproxy.DelayBefore(300 * time.Millisecond)}))
	}
	defer func() { assert.Positive(t, fired(slow), "the give-backs held back") }()

	cases := []struct {
		name    string
		ctx     context.Context
		acquire func(context.Context) (context.Context, error)
	}{
		{"Mutex.Lock ack-m", bg, c.Mutex("ack-m").Lock},
		{"Mutex.TryLock ack-m", bg, c.Mutex("ack-m").TryLock},
		{"Mutex.TryLockFor ack-m", bg, func(ctx context.Context) (context.Context, error) {
			return c.Mutex("ack-m").TryLockFor(ctx, 5*time.Second)
		}},
		{"FairMutex.Lock ack-f", bg, c.FairMutex("ack-f").Lock},
		{"FairMutex.TryLock ack-f", bg, c.FairMutex("ack-f").TryLock},
		{"RWMutex.Lock ack-rw", bg, c.RWMutex("ack-rw").Lock},
		{"RWMutex.RLock ack-rw", bg, c.RWMutex("ack-rw").RLock},
		{"Semaphore.Acquire ack-sem", bg, func(ctx context.Context) (context.Context, error) { return sem.Acquire(ctx, 2) }},
		{"Semaphore.TryAcquire ack-sem", bg, func(ctx context.Context) (context.Context, error) { return sem.TryAcquire(ctx, 1) }},
		{"MultiLock.Lock ack-ml", bg, c.MultiLock([]string{"ack-ml", "ack-m2"}).Lock},
		{"Mutex re-entry ack-held", hctx, held.Lock},
		{"Semaphore re-entry ack-sem", sctx, func(ctx context.Context) (context.Context, error) { return sem.Acquire(ctx, 1) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(tc.ctx, 5*time.Second) // fail, not hang, without the option
			defer cancel()
			start := time.Now()
			got, err := tc.acquire(ctx)
			took := time.Since(start)
			require.ErrorIs(t, err, ErrNotReplicated)
			assert.Contains(t, err.Error(), fmt.Sprintf("%q", tc.name[strings.LastIndex(tc.name, " ")+1:]), "the error names the lock")
			assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged")
			assert.Nil(t, got, "no hold is handed out")
			assert.Less(t, took, timeout+3*time.Second, "it fails within about the timeout")
			assert.Equal(t, baseline, e.keys(t), "nothing is left behind on the primary")
			// Undone when the error returns, re-entries too.
			n, err := held.HoldCount(hctx)
			require.NoError(t, err)
			assert.Equal(t, 1, n, "the failed re-entry was taken back")
			avail, err := sem.Available(bg)
			require.NoError(t, err)
			assert.Equal(t, 2, avail, "the failed permits were given back")
		})
	}
	hook.Clear()

	n, err := held.HoldCount(hctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the failed re-entry was taken back")
	require.NoError(t, hctx.Err(), "the hold itself stays")
	avail, err := sem.Available(bg)
	require.NoError(t, err)
	assert.Equal(t, 2, avail, "the failed permits were given back")

	// A wait bound shorter than WAIT's timeout: the call ends at its bound,
	// and what the script took is given back once WAIT answers.
	m := c.Mutex("ack-short")
	_, err = m.TryLockFor(bg, 20*time.Millisecond)
	require.ErrorIs(t, err, ErrNotAcquired)
	eventually(t, 3*time.Second, "the abandoned acquisition given back", func() bool {
		n, _ := e.rdb(t).Exists(bg, "ack-short").Result()
		return n == 0
	})

	// Releases do not wait for the replica.
	require.NoError(t, held.Unlock(hctx))
	require.NoError(t, sem.Release(sctx, 1))
	avail, err = sem.Available(bg)
	require.NoError(t, err)
	assert.Equal(t, 3, avail)
}

// A renewal that is not acknowledged counts as failed: with the replica
// frozen, the holder is told (ErrLeaseLost) within the lease, counted from
// before the freeze, and the lock is then released on the primary.
func TestReplicaAckRenewalNotAcknowledged(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	const lease = 900 * time.Millisecond
	c := newClient(t, ackRDB(t, e.addr), WithWatchdogTimeout(lease), WithReplicaAck(1, 100*time.Millisecond))
	m := c.Mutex("ack-renew")
	lctx, err := m.Lock(context.Background())
	require.NoError(t, err)

	time.Sleep(2 * lease)
	require.NoError(t, lctx.Err(), "acknowledged renewals keep the hold")

	paused := time.Now()
	replica.Pause()
	t.Cleanup(replica.Resume)
	// The last acknowledged renewal was sent before paused: by paused+lease
	// its lease has run out on the replica, and the hold's context says
	// so when asked (its Err reads the local deadline itself, whenever its
	// timer runs on a busy machine).
	time.Sleep(time.Until(paused.Add(lease)))
	assert.Error(t, lctx.Err(), "told before the lease of the last acknowledged renewal ran out")
	select {
	case <-lctx.Done():
	case <-time.After(5 * lease):
		t.Fatal("the holder was not told its renewals are not replicated")
	}
	require.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
	eventually(t, 3*time.Second, "the lost hold released on the primary", func() bool {
		n, _ := e.rdb(t).Exists(context.Background(), "ack-renew").Result()
		return n == 0
	})
}

// A Sentinel failover right after Lock returned keeps the lock with its
// holder: the acknowledged replica that is promoted has it. The replica is
// frozen while Lock runs, so without the acknowledgement Lock would return
// before the replica had the lock, and the failover would lose it.
func TestReplicaAckSentinelFailover(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	s := redistestSentinel(t, e, 1)
	newFailover := func() *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Addr()},
			MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 3 * time.Second})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	const lease = 10 * time.Second
	m := newClient(t, newFailover(), WithWatchdogTimeout(lease), WithReplicaAck(1, 2*time.Second)).Mutex("sentinel")
	other := newClient(t, newFailover(), WithWatchdogTimeout(lease)).Mutex("sentinel")

	ctx := returnsAfterResume(t, replica, func() (context.Context, error) { return m.Lock(context.Background()) })
	e.srv.Kill() // at once: the replica has only what it acknowledged

	rr := replica.Client(t)
	eventually(t, 15*time.Second, "the replica promoted", func() bool {
		info, _ := rr.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "role:master")
	})
	var err error
	eventually(t, 5*time.Second, "the failover clients to follow the new master", func() bool {
		_, err = other.TryLock(context.Background())
		return !strings.Contains(fmt.Sprint(err), "connection refused")
	})
	assert.ErrorIs(t, err, ErrNotAcquired, "the promoted replica keeps the lock")
	require.NoError(t, context.Cause(ctx), "the holder kept its hold through the failover")
	require.NoError(t, m.Unlock(ctx))
	octx, err := other.TryLock(context.Background())
	require.NoError(t, err, "free once its holder released it")
	require.NoError(t, other.Unlock(octx))
}

// With no replica at all, an acquisition cannot be acknowledged: it fails
// with ErrNotReplicated and leaves no lock.
func TestReplicaAckNoReplica(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, 50*time.Millisecond))
		m := c.Mutex("ack-none")
		_, err := m.Lock(context.Background())
		require.ErrorIs(t, err, ErrNotReplicated)
		assert.EqualError(t, err, `redisync: lock "ack-none": not replicated: 0 of 1 replicas acknowledged within 50ms; the acquisition was undone`)
		assert.Empty(t, e.keys(t))
	})
}

func TestReplicaAckInvalid(t *testing.T) {
	e := miniEnv(t)
	rdb := e.rdb(t) // ReadTimeout 1s
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": e.addr}})
	t.Cleanup(func() { _ = ring.Close() })
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		opt  Option
		want string
	}{
		{"zero replicas", rdb, WithReplicaAck(0, time.Second/2), "0 replicas is not positive"},
		{"negative replicas", rdb, WithReplicaAck(-1, time.Second/2), "-1 replicas is not positive"},
		{"zero timeout", rdb, WithReplicaAck(1, 0), "timeout 0s is not positive"},
		{"negative timeout", rdb, WithReplicaAck(1, -time.Second), "timeout -1s is not positive"},
		{"sub-millisecond timeout", rdb, WithReplicaAck(1, time.Microsecond), "below WAIT's resolution"},
		{"a ring", ring, WithReplicaAck(1, time.Second/2), "*redis.Ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.rdb, tc.opt)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	c, err := New(rdb, WithReplicaAck(1, time.Second/2))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	// The redis client's ReadTimeout (1s) no longer bounds it: WAIT goes
	// on redisync's own connection.
	c, err = New(rdb, WithReplicaAck(1, 2*time.Second))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// On a Cluster, WAIT goes to the lock's own master: with the replica of
// one master frozen, only acquisitions on that master fail, and renewals
// (one WAIT per node) lose only that master's holds.
func TestReplicaAckCluster(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	const lease = 1500 * time.Millisecond
	c := newClient(t, rdb, WithWatchdogTimeout(lease), WithReplicaAck(1, 200*time.Millisecond))
	bg := context.Background()

	// Two lock names served by each master.
	names := make([][]string, len(rc.Masters))
	for i := 0; len(names[0]) < 2 || len(names[1]) < 2 || len(names[2]) < 2; i++ {
		name := fmt.Sprintf("ack-%d", i)
		node, err := rdb.MasterForKey(bg, name)
		require.NoError(t, err)
		for j, m := range rc.Masters {
			if node.Options().Addr == m.Addr() && len(names[j]) < 2 {
				names[j] = append(names[j], name)
			}
		}
	}
	holds := make([]context.Context, len(rc.Masters))
	for i := range rc.Masters {
		var err error
		holds[i], err = c.Mutex(names[i][0]).Lock(bg)
		require.NoError(t, err, "master %d", i)
	}

	rc.Replicas[0][0].Pause()
	t.Cleanup(rc.Replicas[0][0].Resume)
	_, err := c.Mutex(names[0][1]).TryLock(bg)
	require.ErrorIs(t, err, ErrNotReplicated, "the frozen replica's master")
	n, err := rc.Masters[0].Client(t).Exists(bg, names[0][1]).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left on that master")
	for i := 1; i < len(rc.Masters); i++ {
		m := c.Mutex(names[i][1])
		ctx, err := m.TryLock(bg)
		require.NoError(t, err, "master %d, whose replica runs", i)
		require.NoError(t, m.Unlock(ctx))
	}

	select {
	case <-holds[0].Done():
	case <-time.After(5 * lease):
		t.Fatal("the hold on the master whose replica is frozen was not lost")
	}
	require.ErrorIs(t, context.Cause(holds[0]), ErrLeaseLost)
	time.Sleep(lease)
	for i := 1; i < len(rc.Masters); i++ {
		require.NoError(t, holds[i].Err(), "master %d's hold, renewed and acknowledged", i)
		require.NoError(t, c.Mutex(names[i][0]).Unlock(holds[i]))
	}
}

// A cohort handoff (a Mutex's last Unlock handing the lock to a waiter of
// the same Client) is an acquisition for its receiver: with the replica
// frozen, the receiver's Lock fails with ErrNotReplicated, the releaser's
// Unlock succeeds, and no lock is left behind.
func TestReplicaAckCohortHandoff(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	const timeout = 200 * time.Millisecond
	c := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, timeout))
	m := c.Mutex("ack-handoff")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	w := idleWaiter(t, context.Background(), c, m)

	replica.Pause()
	t.Cleanup(replica.Resume)
	require.NoError(t, m.Unlock(hctx))
	got := <-w
	require.ErrorIs(t, got.err, ErrNotReplicated)
	assert.Contains(t, got.err.Error(), `"ack-handoff"`)
	assert.Empty(t, e.keys(t), "the handed lock was taken back")
}

// ErrNotReplicated's text tells whether the acquisition was undone: not
// when the undo failed (its lease frees the lock then), and "being
// undone" when the call's context ended while the undo was on its way.
func TestReplicaAckUndoOutcomeIsTold(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	admin := e.rdb(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	c := newClient(t, rdb, WithReplicaAck(1, 50*time.Millisecond)) // no replica: never acknowledged
	m := c.Mutex("ack-undo", WithLease(3*time.Second))

	// The undo cannot be sent.
	failed := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Drop.Script), Times: 1, Action: faultproxy.Fail(nil)})
	_, err := m.Lock(bg)
	require.ErrorIs(t, err, ErrNotReplicated)
	require.Equal(t, 1, failed.Fired(), "the undo failed")
	assert.Contains(t, err.Error(), "undoing the acquisition failed")
	assert.NotContains(t, err.Error(), "was undone")
	n, err := admin.Exists(bg, "ack-undo").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "what the failed undo left is freed by its lease")
	require.NoError(t, admin.Del(bg, "ack-undo").Err())

	// The undo is slow, and the call's context ends meanwhile.
	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Drop.Script), Times: 1, Action: faultproxy.DelayBefore(time.Second)})
	ctx, cancel := context.WithTimeout(bg, 400*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, ErrNotReplicated)
	// Not after the slow undo (1s past its send).
	assert.Less(t, time.Since(start), 900*time.Millisecond+lag.Slack(), "the call returns when its context ends (the machine's worst delay meanwhile: %v)", lag.Worst())
	assert.Contains(t, err.Error(), "is being undone (the call's context ended first)")
	assert.Equal(t, 1, slow.Fired(), "the undo held back")
	eventually(t, 3*time.Second, "the undo to land", func() bool {
		n, _ := admin.Exists(bg, "ack-undo").Result()
		return n == 0
	})

	// And when it goes through, the error says it was undone.
	_, err = m.Lock(bg)
	require.ErrorIs(t, err, ErrNotReplicated)
	assert.Contains(t, err.Error(), "; the acquisition was undone")
	assert.Empty(t, e.keys(t))
}

// WithReplicaAck's timeout bounds the extra latency of each acquisition
// attempt, also when attempts on one node come while others wait in
// WAIT: none waits for another's WAIT to end first.
func TestReplicaAckTimeoutBoundsEachAttempt(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	// No replica: every WAIT runs to its timeout.
	e := realEnv(t)
	const timeout = 400 * time.Millisecond
	c := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, timeout))
	bg := context.Background()
	_, err := c.Mutex("ack-each-warm").Lock(bg) // scripts cached, connections made
	require.ErrorIs(t, err, ErrNotReplicated)

	const n = 8
	took := make([]time.Duration, n)
	lag := watchLag(t) // the machine's scheduling delay, added to the bound
	var wg sync.WaitGroup
	for i := range n {
		time.Sleep(50 * time.Millisecond) // each comes while the ones before wait
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := c.Mutex(fmt.Sprintf("ack-each-%d", i)).Lock(bg)
			took[i] = time.Since(start)
			assert.ErrorIs(t, err, ErrNotReplicated)
		}()
	}
	wg.Wait()
	// An attempt that waited for another's WAIT would take a second
	// timeout (the eighth, seven); the bound adds to one timeout what the
	// machine's scheduling delay was meanwhile.
	for i, d := range took {
		assert.Less(t, d, timeout+250*time.Millisecond+lag.Slack(),
			"attempt %d took %v (the machine's worst delay meanwhile: %v)", i, d, lag.Worst())
	}
	assert.Empty(t, e.keys(t))
}

// After SCRIPT FLUSH, an attempt whose script answers NOSCRIPT is sent
// again as EVAL: the attempt still waits in WAIT once, within the
// timeout, not once for the EVALSHA pipeline and once more for the EVAL
// resend (issue 24, #7).
func TestReplicaAckNoScriptWaitsOnce(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	// No replica: every WAIT runs to its timeout.
	e := realEnv(t)
	const timeout = time.Second
	c := newClient(t, ackRDB(t, e.addr), WithReplicaAck(1, timeout))
	bg := context.Background()
	_, err := c.Mutex("ack-noscript-warm").TryLock(bg) // connections made
	require.ErrorIs(t, err, ErrNotReplicated)
	for i := range 2 {
		require.NoError(t, e.rdb(t).ScriptFlush(bg).Err())
		lag := watchLag(t)
		start := time.Now()
		_, err = c.Mutex(fmt.Sprintf("ack-noscript-%d", i)).TryLock(bg)
		took := time.Since(start)
		require.ErrorIs(t, err, ErrNotReplicated)
		// Waiting in WAIT twice would take two timeouts.
		assert.Less(t, took, timeout+600*time.Millisecond+lag.Slack(), "one attempt after SCRIPT FLUSH took %v (the machine's worst delay meanwhile: %v)", took, lag.Worst())
		lag.Stop()
	}
	assert.Empty(t, e.keys(t))
}
