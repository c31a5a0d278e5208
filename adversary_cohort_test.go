package redisync

import (
	"context"
	"errors"
	"strconv"
	"sync"
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

// Adversarial tests of the Mutex's cohort handoff (internal/cohort,
// lua/handoff.lua). Each comment states the promise, the sequence and what
// goes wrong on the code it was written against.

// TestAdvCohortChannelSharedByTwoNames
//
// Promise (Mutex doc, doc.go): mutual exclusion across clients and
// goroutines, always; the handoff gives the lock the releaser holds to a
// waiter of that lock.
//
// Sequence: Redisson's channel naming (redissonName) gives the Mutex "coll"
// the channel "redisson_lock__channel:{coll}", and the Mutex "{coll}" (a
// name that contains "{") the same channel. One Client holds "coll"; a
// goroutine of the same Client waits for "{coll}", which another client
// holds; the holder of "coll" unlocks.
//
// What goes wrong: claim (internal/cohort) picks the first idle waiter of the
// channel, whatever lock it waits for, and handOver runs handoff.lua on the
// releaser's key ("coll") for that waiter's field. The waiter of "{coll}"
// gets a hold of "{coll}" (its context is live, its Lock returns nil) while
// the other client holds "{coll}"; "coll" is left held by an owner that
// nobody in the process knows.
func TestAdvCohortChannelSharedByTwoNames(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	c := e.client(t)
	plain, tagged := c.Mutex("coll"), c.Mutex("{coll}")
	require.Equal(t, plain.channel, tagged.channel, "premise: the two names share Redisson's channel")

	other := e.client(t).Mutex("{coll}")
	octx, err := other.Lock(bg)
	require.NoError(t, err)
	defer func() { _ = other.Unlock(octx) }()

	pctx, err := plain.Lock(bg)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(bg, 2*time.Second)
	defer cancel()
	w := faultLockAsync(wctx, tagged)
	eventually(t, 2*time.Second, "the waiter of {coll} queued", func() bool { return localWaiters(c, tagged.channel) == 1 })
	time.Sleep(30 * time.Millisecond) // waiting, not trying

	require.NoError(t, plain.Unlock(pctx))
	got := <-w
	if got.err == nil {
		t.Errorf("Lock of %q returned a live hold (ctx err %v) while another client holds it; Redis: %q=%v, %q=%v",
			"{coll}", got.hctx.Err(),
			"{coll}", e.rdb(t).HGetAll(bg, "{coll}").Val(), "coll", e.rdb(t).HGetAll(bg, "coll").Val())
		_ = tagged.Unlock(got.hctx)
	}
	assert.Zero(t, e.rdb(t).Exists(bg, "coll").Val(), "the unlocked lock %q is left held", "coll")
}

// TestAdvCohortRunNeverBoundedWhenChannelIsRecreated
//
// Promise (Mutex.Unlock doc, doc.go): waiters in other clients get their
// turn: once one of them is subscribed, a Client hands over at most 16
// times in a row (or for 5ms), then frees the lock for it.
//
// Sequence: two goroutines of one Client take turns on a lock, each holding
// it 10ms and pausing 3ms between its holds (a common worker loop). Each
// Unlock finds the other goroutine waiting and hands the lock over. A
// waiter of another client is subscribed and waits with TryLockFor(3s).
//
// (The test waits for these two conditions explicitly rather than with
// fixed sleeps, to take scheduling noise out; a fixed 10ms hold and 3ms
// pause fail the same way most of the time.)
//
// What goes wrong: the run of handoffs is counted on the channel's local
// state (channel.run, runStart in pubsub.go), which pubsub.leave deletes
// when its last local waiter leaves. The receiver of each handoff is the
// channel's only waiter, so it deletes the channel when it returns; the
// releaser, pausing, subscribes afresh after that, on a new channel whose
// run starts at 0. Every handoff is the first of its run: neither bound
// (cohortRun, cohortTime) is ever reached, the lock is never freed, and the
// other client's waiter starves (its next look is the holder's lease away,
// 30s).
func TestAdvCohortRunNeverBoundedWhenChannelIsRecreated(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	var handed, acquired atomic.Int64
	c := e.client(t, WithObserver(&Observer{Acquired: func(_ context.Context, ev HoldEvent) {
		acquired.Add(1)
		if ev.Handoff {
			handed.Add(1)
		}
	}}))
	const name = "adv-cohort-starve"
	m := c.Mutex(name)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, err := m.Lock(bg)
				if !assert.NoError(t, err) {
					return
				}
				// Hold 10ms, and until the other goroutine waits (so the
				// Unlock hands over), at most 200ms.
				time.Sleep(10 * time.Millisecond)
				advPoll(200*time.Millisecond, func() bool { return advIdleWaiters(c, m.channel) == 1 })
				assert.NoError(t, m.Unlock(ctx))
				// Pause until the receiver has left the channel (a few
				// ms in a real loop), at most 50ms: scheduling noise
				// aside, as with a fixed pause of a few ms.
				advPoll(50*time.Millisecond, func() bool { return localWaiters(c, m.channel) == 0 })
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the two take turns by handoffs

	o := e.client(t).Mutex(name)
	start := time.Now()
	before := acquired.Load()
	octx, err := o.TryLockFor(bg, 3*time.Second)
	waited := time.Since(start)
	if err == nil {
		require.NoError(t, o.Unlock(octx))
	}
	close(stop)
	wg.Wait()
	t.Logf("the other client waited %v (%v); meanwhile %d acquisitions in the first client, %d handed over in all",
		waited.Round(time.Millisecond), err, acquired.Load()-before, handed.Load())
	require.NoError(t, err, "another client's waiter starved while the first client handed the lock over without bound")
}

// TestAdvCohortCloseDuringHandoffWhoseReplyIsLost
//
// Promise (Client.Close doc, doc.go): Close stops everything and leaves no
// lock behind; a handoff whose outcome is unknown is swept.
//
// Sequence: a goroutine holds the lock, another of the same Client waits;
// the holder unlocks, and the handoff script is slow to reach Redis
// (300ms); Close is called meanwhile (the waiter ends with ErrClosed); the
// script then runs, handing the lock to the waiter's owner, and its reply
// is lost.
//
// What goes wrong: handOver settles an abandoned handoff with an error, so
// giveBackHandoff (handover.go) calls sweep, which does nothing once the
// Client is closed (bgStart is false): nothing gives the lock back, and it
// stays held by an owner of a closed Client for its whole lease (30s).
func TestAdvCohortCloseDuringHandoffWhoseReplyIsLost(t *testing.T) {
	e := realEnv(t)
	rdb, slowHook := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	lossHook := faultproxy.NewHook()
	gate(rdb, lossHook) // runs inside slowHook: delayed, then the reply lost
	c, err := New(rdb, WithHooks(gatedHooks(rdb)...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	c.scriptHandoff = true // the handoff script's own reply is lost
	m := c.Mutex("adv-cohort-close-lost")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	w := idleWaiter(t, context.Background(), c, m)

	slow := slowHook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script), Times: 1,
		Action: faultproxy.DelayBefore(300 * time.Millisecond)})
	lost := lossHook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script), Times: 1,
		Action: faultproxy.LoseReply()})
	unlocked := make(chan error, 1)
	go func() { unlocked <- m.Unlock(hctx) }()
	eventually(t, time.Second, "the handoff sent", func() bool { return slow.Fired() == 1 })
	require.NoError(t, c.Close())
	got := <-w
	require.True(t, errors.Is(got.err, ErrClosed), "the waiter ends with ErrClosed: %v", got.err)
	uerr := <-unlocked
	require.Equal(t, 1, lost.Fired(), "the handoff ran and its reply was lost (Unlock: %v)", uerr)

	deadline := time.Now().Add(2 * time.Second)
	for len(e.keys(t)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ks := e.keys(t); len(ks) > 0 {
		t.Errorf("2s after Close, the lock is still held: %v (ttl %v)",
			e.rdb(t).HGetAll(context.Background(), m.Name()).Val(), e.rdb(t).PTTL(context.Background(), m.Name()).Val())
	}
}

// advIdleWaiters counts the waiters of c on channel that may be handed the
// lock now (internal/cohort: waiting, not trying, not reserved).
func advIdleWaiters(c *Client, channel string) int { return c.co.Idle(channel) }

// advPoll polls cond every 200µs until it holds or d has passed.
func advPoll(d time.Duration, cond func() bool) {
	for deadline := time.Now().Add(d); !cond() && time.Now().Before(deadline); {
		time.Sleep(200 * time.Microsecond)
	}
}

// TestAdvCohortForceUnlockScriptAfterHandoff
//
// Promise (Mutex.ForceUnlock doc): "Holders lose their lease: their
// contexts are cancelled with ErrLeaseLost, in this process before the
// lock is freed"; every hold's context tells the truth (live ⇒ held).
//
// Sequence: ForceUnlock is called while the lock is free, and its script
// is slow to reach Redis (400ms). Meanwhile, in the same Client, a
// goroutine takes the lock and unlocks it, handing it over to a waiting
// goroutine. Then ForceUnlock's script runs and frees the lock.
//
// What goes wrong: watchdog.force bumps the lock's epoch before the script
// is sent, and a grant is refused only when the epoch moved after its own
// stamp; the handoff (and the first Lock) were stamped after the bump, so
// the receiver's hold is registered and stays live after the script freed
// the lock: another client takes it, and two hold it at once. Not specific
// to the handoff: any acquisition sent between force() and the script
// behaves the same (the first Lock here too).
func TestAdvCohortForceUnlockScriptAfterHandoff(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	c := newClient(t, rdb)
	const name = "adv-cohort-force"
	m := c.Mutex(name)
	slow := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.ForceUnlock.Script), Times: 1,
		Action: faultproxy.DelayBefore(400 * time.Millisecond)})
	forced := make(chan bool, 1)
	go func() {
		ok, err := m.ForceUnlock(bg)
		assert.NoError(t, err)
		forced <- ok
	}()
	eventually(t, time.Second, "ForceUnlock under way", func() bool { return slow.Fired() == 1 })

	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := faultLockAsync(bg, m)
	eventually(t, time.Second, "the waiter idle", func() bool { return advIdleWaiters(c, m.channel) == 1 })
	require.NoError(t, m.Unlock(hctx))
	got := <-w
	require.NoError(t, got.err)
	t.Logf("ForceUnlock found the lock held: %v", <-forced) // either way: what matters is below

	time.Sleep(50 * time.Millisecond)
	if got.hctx.Err() == nil { // live ⇒ held: no other client can take it
		other := e.client(t).Mutex(name)
		octx, err := other.TryLock(bg)
		if err == nil {
			t.Errorf("the receiver's hold context is live (cause %v), yet another client took the lock: ForceUnlock freed it after the handoff",
				context.Cause(got.hctx))
			_ = other.Unlock(octx)
		}
	}
	_ = m.Unlock(got.hctx)
}

// TestAdvCohortHandoffUsesReceiversHandle (regression, passes)
//
// Promise: a handoff is a first acquisition of the receiver (its lease, its
// fencing), whatever the releaser's handle was; tokens strictly increase,
// also when the handoff's reply is lost and the receiver adopts the lock
// by its own next attempt.
//
// Sequence: (1) an unfenced watchdog holder hands over to a waiter whose
// handle has WithFencing and WithLease(400ms). (2) That fenced holder hands
// over to another fenced waiter, and the handoff's reply is lost.
//
// Checks: (1) the receiver's lease in Redis is its 400ms, and it has a
// token equal to the counter; (2) the second receiver gets the lock with a greater token,
// equal to the counter.
func TestAdvCohortHandoffUsesReceiversHandle(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	var handed atomic.Int64
	c := newClient(t, rdb, WithObserver(&Observer{Acquired: func(_ context.Context, ev HoldEvent) {
		if ev.Handoff {
			handed.Add(1)
		}
	}}))
	const name = "adv-cohort-handles"
	plain := c.Mutex(name)
	fenced := c.Mutex(name, WithFencing(), WithLease(400*time.Millisecond))
	admin := e.rdb(t)

	pctx, err := plain.Lock(bg)
	require.NoError(t, err)
	w := faultLockAsync(bg, fenced)
	eventually(t, time.Second, "the fenced waiter idle", func() bool { return advIdleWaiters(c, plain.channel) == 1 })
	require.NoError(t, plain.Unlock(pctx))
	got := <-w
	require.NoError(t, got.err)
	require.Equal(t, int64(1), handed.Load(), "handed over")
	pttl := admin.PTTL(bg, name).Val()
	assert.InDelta(t, 400, pttl.Milliseconds(), 100, "the receiver's own lease")
	tok1, ok := fenced.Token(got.hctx)
	require.True(t, ok, "the fenced receiver has a token")
	assert.Equal(t, admin.Get(bg, fenceKey(name)).Val(), strconv.FormatInt(tok1, 10))

	// (2) fenced to fenced, reply lost: the receiver adopts the lock.
	lost := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script), Times: 1, Action: faultproxy.LoseReply()})
	f2 := c.Mutex(name, WithFencing())
	w2 := faultLockAsync(bg, f2)
	eventually(t, time.Second, "the second waiter idle", func() bool { return advIdleWaiters(c, plain.channel) == 1 })
	_ = fenced.Unlock(got.hctx) // the reply is lost: an error is expected
	got2 := <-w2
	require.NoError(t, got2.err)
	require.Equal(t, 1, lost.Fired(), "the second handoff ran and its reply was lost")
	tok2, ok := f2.Token(got2.hctx)
	require.True(t, ok)
	assert.Greater(t, tok2, tok1, "tokens increase across a handoff whose reply was lost")
	assert.Equal(t, admin.Get(bg, fenceKey(name)).Val(), strconv.FormatInt(tok2, 10))
	n, err := admin.HGet(bg, name, holds.Carried(got2.hctx, f2.spec.Ref).Field).Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.NoError(t, f2.Unlock(got2.hctx))
	assert.Zero(t, admin.Exists(bg, name).Val(), "freed")
}

// A Mutex name whose Redisson unlock channel falls in another Cluster slot
// ("a}b": the channel's hash tag is "a"; "a{}b": an empty tag) cannot be
// unlocked by a script that declares both keys: on a Cluster it is refused
// when the handle is made, with a clear error, instead of failing with
// CROSSSLOT at its first Unlock. Elsewhere it works.
func TestMutexNameWhoseChannelIsInAnotherSlot(t *testing.T) {
	cl := sharedCluster(t)
	c := newClient(t, cl.Client(t))
	for _, name := range []string{"a}b", "a{}b"} {
		_, err := c.Mutex(name).Lock(context.Background())
		require.ErrorIs(t, err, ErrInvalid, name)
		assert.Contains(t, err.Error(), "different slots")
	}
	for _, name := range []string{"orders:42", "{orders}:42", "x{y}z"} {
		m := c.Mutex(name)
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err, name)
		require.NoError(t, m.Unlock(ctx), name)
	}
	e := realEnv(t)
	m := e.client(t).Mutex("a}b")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err, "on a single node the name works")
	require.NoError(t, m.Unlock(ctx))
}
