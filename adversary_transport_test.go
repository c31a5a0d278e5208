package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// Adversarial tests of the transport under load and of the undo that
// WithReplicaAck waits for (UndoNow).

// A cohort handoff is the receiver's acquisition: when the replicas do
// not acknowledge it, the receiver's Lock fails with ErrNotReplicated, and
// ErrNotReplicated promises the acquisition was undone in Redis before the
// call returns. The give-back is slowed so that an undo that is not waited
// for is still to come when the check looks.
func TestAdvReplicaAckHandoffUndoneBeforeReturn(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const timeout = 200 * time.Millisecond
	e, replica, c, hook := ackFaulted(t, timeout)
	m := c.Mutex("adv-ack-handoff")
	bg := context.Background()
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := idleWaiter(t, bg, c, m)

	replica.Pause()
	t.Cleanup(replica.Resume)
	var slow []*faultproxy.Rule
	for _, s := range []*lua.Script{lua.Drop, lua.Unlock} {
		slow = append(slow, hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(s.Script), Action: faultproxy.DelayBefore(500 * time.Millisecond)}))
	}
	defer func() { assert.Positive(t, fired(slow), "the undo held back") }()
	require.NoError(t, m.Unlock(hctx))
	var got faultLockResult
	select {
	case got = <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never returned")
	}
	require.ErrorIs(t, got.err, ErrNotReplicated)
	n, err := e.rdb(t).Exists(bg, "adv-ack-handoff").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged handoff was undone before the receiver's Lock returned")
}

// advLoad runs callers goroutines, each sending calls on one lane one
// after the other until stop closes, in turns: with a context that can
// end, with one that cannot (sent directly when the lane is idle), and
// as a release (direct). It returns the longest wait any call had, and
// the first error.
func advLoad(c *Client, callers int, stop <-chan struct{}) (<-chan time.Duration, <-chan error) {
	worst := make(chan time.Duration, 1)
	errs := make(chan error, callers)
	var mu sync.Mutex
	var max time.Duration
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("adv:load:%d:%d", g, i)
				k := trLock(key)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch i % 3 {
				case 0:
					ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				case 2:
					k = call{Script: lua.Unlock, Keys: []string{key}, Args: []any{"tr:owner", 1, 30000, publish, "0", key + ":chan"}, Direct: true}
				}
				start := time.Now()
				r := c.tr.Do(ctx, k, nil)
				d := time.Since(start)
				cancel()
				if err := r.Err(); err != nil {
					errs <- fmt.Errorf("%s: %w", key, err)
					return
				}
				mu.Lock()
				if d > max {
					max = d
				}
				mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		worst <- max
		close(errs)
	}()
	return worst, errs
}

// One call whose reply is slow (held in the hooks' seam) holds up no
// other call, whether its context can end or not, under a steady load of
// callers of every kind; when the client closes meanwhile, the calls that
// come after its Drain fail unsent (ErrNotSent: the transport is closed),
// those written before it closed the connections fail with no reply
// (ErrNoReply), none fails otherwise, and every goroutine of the engine
// stops once the slow reply is in.
func TestAdvLaneOneSlowReplyAmongMany(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	for _, how := range []string{"cancellable", "background"} {
		t.Run(how, func(t *testing.T) {
			e := realEnv(t)
			rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
			c, err := New(rdb, WithHooks(gatedHooks(rdb)...))
			require.NoError(t, err)
			bg := context.Background()
			require.NoError(t, c.tr.Do(bg, trLock("adv:warm"), nil).Err())
			require.NoError(t, c.tr.Do(bg, call{Script: lua.Unlock, Keys: []string{"adv:warm"}, Args: []any{"tr:owner", 1, 30000, publish, "0", "c"}}, nil).Err())

			// The slow reply is held until the test releases it: a call
			// that waited for it would not finish before that, however
			// busy the machine (an order, not a bound in milliseconds).
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free)
			slow := hook.OnCommand(faultproxy.CommandRule{Args: onKey("adv:slow"), Times: 1, Action: faultproxy.HoldReply(release)})
			slowDone := make(chan reply, 1)
			go func() {
				ctx, cancel := context.WithTimeout(bg, 30*time.Second)
				defer cancel()
				if how == "background" {
					ctx = bg // a context that cannot end
				}
				slowDone <- c.tr.Do(ctx, trLock("adv:slow"), nil)
			}()
			eventually(t, 2*time.Second, "the slow call sent", func() bool { return slow.Fired() == 1 })

			stop := make(chan struct{})
			worst, errs := advLoad(c, 8, stop)
			time.Sleep(700 * time.Millisecond)
			close(stop)
			select {
			case w := <-worst:
				t.Logf("longest wait beside the held pipeline: %v", w)
			case <-time.After(10 * time.Second): // the load's calls take milliseconds
				free()
				t.Fatal("a call waited for the slow pipeline: the load did not end while its reply was held")
			}
			for err := range errs {
				t.Error(err)
			}
			select {
			case r := <-slowDone:
				t.Fatalf("the slow reply came before its release (%v): the test proves nothing", r.Err())
			default:
			}

			// Close while the slow pipeline is out and calls keep coming.
			stop = make(chan struct{})
			worst, errs = advLoad(c, 4, stop)
			time.Sleep(50 * time.Millisecond)
			closed := make(chan struct{})
			go func() { _ = c.Close(); close(closed) }()
			time.Sleep(100 * time.Millisecond)
			close(stop)
			free()
			for err := range errs {
				// Sent after Drain: not sent; written before Drain closed
				// the connections: no reply. Nothing else.
				closed := errors.Is(err, transport.ErrNotSent) || errors.Is(err, transport.ErrNoReply)
				if !closed || !strings.Contains(err.Error(), "the Client is closed") {
					t.Errorf("a call during Close: %v", err)
				}
			}
			<-worst
			r := <-slowDone
			require.NoError(t, r.Err())
			select {
			case <-closed:
			case <-time.After(7 * time.Second):
				t.Fatal("Close did not return")
			}
			eventually(t, 2*time.Second, "every worker stopped", func() bool { return c.tr.Workers() == 0 })
		})
	}
}

// The acquisitions TestReplicaAckPausedReplicaFails leaves out, each
// with its give-back slowed: a Mutex's first acquisition (given back by
// drop.lua), an Election's Campaign (elect_resign.lua), a FairMutex's and
// an RWMutex read hold's re-entries. Each is undone when its
// ErrNotReplicated returns.
func TestAdvReplicaAckUndoneBeforeReturnMore(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const timeout = 200 * time.Millisecond
	e, replica, c, hook := ackFaulted(t, timeout)
	bg := context.Background()
	admin := e.rdb(t)

	f := c.FairMutex("adv-ack-f")
	fctx, err := f.Lock(bg)
	require.NoError(t, err)
	rw := c.RWMutex("adv-ack-rw")
	rctx, err := rw.RLock(bg)
	require.NoError(t, err)
	fBefore, err := admin.HGetAll(bg, "adv-ack-f").Result()
	require.NoError(t, err)
	rwBefore, err := admin.HGetAll(bg, "adv-ack-rw").Result()
	require.NoError(t, err)

	replica.Pause()
	t.Cleanup(replica.Resume)
	var slow []*faultproxy.Rule
	for _, s := range []*lua.Script{lua.Drop, lua.ElectResign, lua.Unlock, lua.FairUnlock, lua.RWUnlock, lua.RWRUnlock} {
		slow = append(slow, hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(s.Script), Action: faultproxy.DelayBefore(400 * time.Millisecond)}))
	}
	defer func() { assert.Positive(t, fired(slow), "the undos held back") }()
	gone := func(t *testing.T, key string) {
		n, err := admin.Exists(bg, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: undone before the call returned", key)
	}

	t.Run("Mutex.Lock", func(t *testing.T) {
		_, err := c.Mutex("adv-ack-m").Lock(bg)
		require.ErrorIs(t, err, ErrNotReplicated)
		gone(t, "adv-ack-m")
	})
	t.Run("Election.Campaign", func(t *testing.T) {
		_, err := c.Election("adv-ack-el").Campaign(bg, "me")
		require.ErrorIs(t, err, ErrNotReplicated)
		gone(t, "adv-ack-el")
	})
	t.Run("FairMutex re-entry", func(t *testing.T) {
		_, err := f.Lock(fctx)
		require.ErrorIs(t, err, ErrNotReplicated)
		got, err := admin.HGetAll(bg, "adv-ack-f").Result()
		require.NoError(t, err)
		assert.Equal(t, fBefore, got, "the re-entry taken back")
	})
	t.Run("RWMutex read re-entry", func(t *testing.T) {
		_, err := rw.RLock(rctx)
		require.ErrorIs(t, err, ErrNotReplicated)
		got, err := admin.HGetAll(bg, "adv-ack-rw").Result()
		require.NoError(t, err)
		assert.Equal(t, rwBefore, got, "the re-entry taken back")
	})
}

// A caller whose context ends while the undo of its unacknowledged
// acquisition is on its way returns then, with ErrNotReplicated; the undo
// still reaches Redis.
func TestAdvReplicaAckContextEndsDuringUndo(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const timeout = 200 * time.Millisecond
	e, replica, c, hook := ackFaulted(t, timeout)
	bg := context.Background()
	admin := e.rdb(t)
	held := c.Mutex("adv-ack-held")
	hctx, err := held.Lock(bg)
	require.NoError(t, err)

	replica.Pause()
	t.Cleanup(replica.Resume)
	// (Slowed twice when Redis answers NOSCRIPT: the EVAL too.) 3s: a call
	// that waited for the undo would return past 3.2s, well apart from
	// its context's 700ms (with 1.5s it was within the old 2s bound).
	var slow []*faultproxy.Rule
	for _, s := range []*lua.Script{lua.Drop, lua.Unlock} {
		slow = append(slow, hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(s.Script), Action: faultproxy.DelayBefore(3 * time.Second)}))
	}
	defer func() { assert.Positive(t, fired(slow), "the undos held back") }()
	for _, tc := range []struct {
		name    string
		key     string
		acquire func(ctx context.Context) (context.Context, error)
	}{
		{"TryLockFor", "adv-ack-tlf", func(ctx context.Context) (context.Context, error) {
			return c.Mutex("adv-ack-tlf").TryLockFor(bg, 700*time.Millisecond)
		}},
		{"Lock", "adv-ack-l", func(ctx context.Context) (context.Context, error) { return c.Mutex("adv-ack-l").Lock(ctx) }},
		// A re-entry waits as long as its own context, which carries
		// the hold: one derived from hctx that ends.
		{"re-entry", "", func(ctx context.Context) (context.Context, error) { return held.Lock(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := bg
			if tc.key == "" {
				parent = hctx
			}
			ctx, cancel := context.WithTimeout(parent, 700*time.Millisecond)
			defer cancel()
			lag := watchLag(t)
			start := time.Now()
			_, err := tc.acquire(ctx)
			took := time.Since(start)
			lag.Stop()
			require.ErrorIs(t, err, ErrNotReplicated)
			assert.Less(t, took, 1700*time.Millisecond+lag.Slack(), "returned when its context ended, not after the undo (the machine's worst delay meanwhile: %v)", lag.Worst())
			if tc.key != "" {
				eventually(t, 10*time.Second, "the undo reached Redis", func() bool {
					n, err := admin.Exists(bg, tc.key).Result()
					return err == nil && n == 0
				})
			} else {
				eventually(t, 10*time.Second, "the re-entry taken back", func() bool {
					v, err := admin.HGetAll(bg, "adv-ack-held").Result()
					if err != nil || len(v) != 1 {
						return false
					}
					for _, n := range v {
						return n == "1"
					}
					return false
				})
			}
		})
	}
}

// waitAcked waits until e's replica acknowledges writes again (after a
// Resume).
func waitAcked(t *testing.T, e *testEnv) {
	t.Helper()
	rdb := e.rdb(t)
	bg := context.Background()
	eventually(t, 10*time.Second, "the replica acknowledging writes", func() bool {
		p := rdb.Pipeline()
		p.Set(bg, "ack-probe", 1, 0)
		p.Del(bg, "ack-probe")
		w := p.Do(bg, "wait", 1, 50)
		_, _ = p.Exec(bg)
		n, _ := w.Int64()
		return n == 1
	})
}

// Goroutines may share a hold (its mutex serialises the scripts that
// change it, so the count sent stays in step with Redis). The undo of one
// goroutine's unacknowledged addition of permits must not take back the
// permits another goroutine added through the same hold meanwhile: Redis
// would then count fewer permits held than the holder has, and let other
// owners take more than the semaphore's permits.
func TestAdvReplicaAckSemaphoreUndoRacesSharedHold(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const timeout = 200 * time.Millisecond
	e, replica, c, hook := ackFaulted(t, timeout)
	bg := context.Background()
	sem := c.Semaphore("adv-ack-sem")
	require.NoError(t, sem.SetPermits(bg, 3))
	sctx, err := sem.Acquire(bg, 1)
	require.NoError(t, err)
	// Scripts cached, so that the slowed undo is sent once.
	require.NoError(t, sem.Release(sctx, 1))
	sctx, err = sem.Acquire(bg, 1)
	require.NoError(t, err)

	replica.Pause()
	t.Cleanup(replica.Resume)
	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemRelease.Script), Times: 1, Action: faultproxy.DelayBefore(time.Second)})
	first := make(chan error, 1)
	go func() {
		_, err := sem.Acquire(sctx, 1) // not acknowledged: taken back
		first <- err
	}()
	eventually(t, 5*time.Second, "the undo on its way", func() bool { return slow.Fired() == 1 })
	replica.Resume()
	waitAcked(t, e)
	// Another goroutine adds 2 permits through the same hold, and the
	// replica acknowledges them.
	_, err = sem.Acquire(sctx, 2)
	require.NoError(t, err)
	require.ErrorIs(t, <-first, ErrNotReplicated)

	assertSemaphoreFull(t, e, "adv-ack-sem")
}

// assertSemaphoreFull checks that the semaphore name, whose 3 permits one
// hold has, lends none to another owner.
func assertSemaphoreFull(t *testing.T, e *testEnv, name string) {
	t.Helper()
	bg := context.Background()
	avail, err := e.client(t).Semaphore(name).Available(bg)
	require.NoError(t, err)
	assert.Equal(t, 0, avail, "the hold has 3 permits: none is free")
	other := e.client(t).Semaphore(name)
	if octx, err := other.TryAcquire(bg, 1); err == nil {
		t.Errorf("another owner took a permit while this hold has all 3")
		require.NoError(t, other.Release(octx, 1))
	}
}

// The same through the give-back of an addition of permits whose caller
// left before its reply (no WithReplicaAck): the hold's lock is held
// until the reply comes and its give-back is sent; a pipeline goes out
// beside a slow one after laneStall, so a re-entry through the hold that
// follows the give-back must not overtake it.
func TestAdvSemaphoreLateGiveBackRacesSharedHold(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	c := newClient(t, rdb)
	bg := context.Background()
	sem := c.Semaphore("adv-late-sem")
	require.NoError(t, sem.SetPermits(bg, 3))
	sctx, err := sem.Acquire(bg, 1)
	require.NoError(t, err)
	require.NoError(t, sem.Release(sctx, 1)) // scripts cached
	sctx, err = sem.Acquire(bg, 1)
	require.NoError(t, err)

	late := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemAcquire.Script), Times: 1, Action: faultproxy.DelayReply(300 * time.Millisecond)})
	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.SemRelease.Script), Times: 1, Action: faultproxy.DelayBefore(time.Second)})
	_, err = sem.TryAcquireFor(sctx, 1, 50*time.Millisecond) // leaves; its script runs
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Equal(t, 1, late.Fired(), "the acquisition's reply delayed")
	eventually(t, 5*time.Second, "the give-back on its way", func() bool { return slow.Fired() == 1 })
	// Another goroutine adds 2 permits through the same hold.
	_, err = sem.Acquire(sctx, 2)
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // the give-back has landed

	assertSemaphoreFull(t, e, "adv-late-sem")
}

// On a Cluster, a MultiLock across slots whose later slot's master is
// not acknowledged by its replica: the first acquisition and a re-entry
// fail with ErrNotReplicated, and what they took in every slot (the
// acknowledged one included) is given back before they return.
func TestAdvReplicaAckClusterMultiLockAcrossSlots(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	hook := faultproxy.NewHook()
	c := newClient(t, cc, WithHooks(hook), WithReplicaAck(1, 200*time.Millisecond))
	bg := context.Background()
	admin := rc.Client(t)

	a, b := nameOn(t, admin, rc.Masters[0], "advml"), nameOn(t, admin, rc.Masters[1], "advml")
	paused := 1 // the master of the later slot
	if keys.Slot(b) < keys.Slot(a) {
		paused = 0
	}
	m := c.MultiLock([]string{a, b})
	require.Len(t, m.groups, 2)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	rc.Replicas[paused][0].Pause()
	t.Cleanup(rc.Replicas[paused][0].Resume)
	slow := hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.MultiUnlock.Script), Action: faultproxy.DelayBefore(500 * time.Millisecond)})

	counts := func() []string {
		var got []string
		for _, k := range []string{a, b} {
			v, err := admin.HGetAll(bg, k).Result()
			require.NoError(t, err)
			for _, n := range v {
				got = append(got, n)
			}
		}
		return got
	}
	_, err = m.Lock(hctx)
	require.ErrorIs(t, err, ErrNotReplicated)
	assert.Equal(t, []string{"1", "1"}, counts(), "the re-entry taken back in both slots")
	require.NotZero(t, slow.Fired(), "the give-backs held back")

	require.NoError(t, m.Unlock(hctx))
	hook.Clear()

	// A first acquisition: the acknowledged slot's lock given back too.
	_, err = m.Lock(bg)
	require.ErrorIs(t, err, ErrNotReplicated)
	for _, k := range []string{a, b} {
		n, err := admin.Exists(bg, k).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s given back before Lock returned", k)
	}
}
