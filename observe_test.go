package redisync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
)

// obsKey marks the contexts a test gives its calls, to check that an
// Observer is handed the caller's context.
type obsKey struct{}

// obsEvent is one call to an Observer's hold functions, with the obsKey
// value of the context it was given ("" when none).
type obsEvent struct {
	what string // "acquired", "failed", "released", "lost"
	e    HoldEvent
	mark string
}

// obsLog records an Observer's hold events, subscription events and mode
// changes, in order.
type obsLog struct {
	mu    sync.Mutex
	holds []obsEvent
	subs  []string // "lost", "restored"
	sube  []SubscriptionEvent
	modes []PubSubModeEvent
}

func (l *obsLog) observer() *Observer {
	hold := func(what string) func(context.Context, HoldEvent) {
		return func(ctx context.Context, e HoldEvent) {
			mark, _ := ctx.Value(obsKey{}).(string)
			l.mu.Lock()
			l.holds = append(l.holds, obsEvent{what, e, mark})
			l.mu.Unlock()
		}
	}
	sub := func(what string) func(SubscriptionEvent) {
		return func(e SubscriptionEvent) {
			l.mu.Lock()
			l.subs, l.sube = append(l.subs, what), append(l.sube, e)
			l.mu.Unlock()
		}
	}
	return &Observer{
		Acquired: hold("acquired"), AcquireFailed: hold("failed"), Released: hold("released"), LeaseLost: hold("lost"),
		SubscriptionLost: sub("lost"), SubscriptionRestored: sub("restored"),
		PubSubModeChanged: func(e PubSubModeEvent) { l.mu.Lock(); l.modes = append(l.modes, e); l.mu.Unlock() },
	}
}

// events returns the hold events so far.
func (l *obsLog) events() []obsEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]obsEvent(nil), l.holds...)
}

// subscription returns the subscription events so far.
func (l *obsLog) subscription() ([]string, []SubscriptionEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.subs...), append([]SubscriptionEvent(nil), l.sube...)
}

// marked returns a context carrying mark for obsLog.
func marked(mark string) context.Context {
	return context.WithValue(context.Background(), obsKey{}, mark)
}

// obsStartSlack is how much of a failed wait's bound may pass between the
// call making it and the acquisition's start, from which HoldEvent.Wait
// counts.
const obsStartSlack = 10 * time.Millisecond

// AcquireFailed is told of every first acquisition that returns without a
// hold, with the caller's context, its wait and its error: a TryLock not
// acquired, TryLockFor's bound, a Lock whose context ends while it waits,
// a Lock ended by Close. Not of a call refused before it tried, nor of a
// re-entry; and no Acquired for any of them.
func TestObserverAcquireFailed(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		var l obsLog
		c := e.client(t, WithObserver(l.observer()))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		rival := k.rival(t, e.client(t), name)
		held, err := rival.lock(context.Background())
		require.NoError(t, err)

		last := func(n int) obsEvent {
			t.Helper()
			evs := l.events()
			require.Len(t, evs, n)
			ev := evs[n-1]
			assert.Equal(t, "failed", ev.what)
			assert.Equal(t, k.event, ev.e.Kind)
			assert.Equal(t, k.nameOf(name), ev.e.Name)
			return ev
		}

		// TryLock: not acquired, at once.
		_, err = mine.try(marked("try"))
		require.ErrorIs(t, err, ErrNotAcquired)
		ev := last(1)
		assert.Equal(t, "try", ev.mark, "the caller's context")
		assert.ErrorIs(t, ev.e.Cause, ErrNotAcquired)
		assert.Equal(t, err.Error(), ev.e.Cause.Error(), "the error the call returned")
		assert.Less(t, ev.e.Wait, time.Second)

		// TryLockFor: its bound.
		start := time.Now()
		_, err = mine.tryFor(marked("tryFor"), 150*time.Millisecond)
		require.ErrorIs(t, err, ErrNotAcquired)
		took := time.Since(start)
		ev = last(2)
		assert.Equal(t, "tryFor", ev.mark)
		assert.ErrorIs(t, ev.e.Cause, ErrNotAcquired)
		// The wait is counted from the acquisition's start, a moment after
		// the call made its bound (its checks, and the scheduler under a
		// loaded suite: 1.3ms once at -parallel 6): its bound, within that.
		assert.GreaterOrEqual(t, ev.e.Wait, 150*time.Millisecond-obsStartSlack)
		assert.LessOrEqual(t, ev.e.Wait, took)

		// Lock: its context ends while it waits.
		ctx, cancel := context.WithCancel(marked("lock"))
		time.AfterFunc(150*time.Millisecond, cancel)
		_, err = mine.lock(ctx)
		require.ErrorIs(t, err, context.Canceled)
		ev = last(3)
		assert.Equal(t, "lock", ev.mark)
		assert.ErrorIs(t, ev.e.Cause, context.Canceled)
		assert.GreaterOrEqual(t, ev.e.Wait, 150*time.Millisecond-obsStartSlack)

		// Refused before trying: no event.
		_, err = mine.lock(ctx) // already ended
		require.Error(t, err)
		assert.Len(t, l.events(), 3, "a call with an ended context tries nothing")

		// A re-entry that fails is no failed first acquisition, and a
		// successful one no acquisition.
		require.NoError(t, rival.unlock(held))
		hctx, err := mine.lock(marked("first"))
		require.NoError(t, err)
		evs := l.events()
		require.Len(t, evs, 4)
		assert.Equal(t, "acquired", evs[3].what)
		assert.Equal(t, "first", evs[3].mark)
		ended, endNow := context.WithCancel(hctx)
		endNow()
		_, err = mine.lock(ended)
		require.Error(t, err)
		rctx, err := mine.lock(hctx)
		require.NoError(t, err)
		require.NoError(t, mine.unlock(rctx))
		require.NoError(t, mine.unlock(hctx))
		evs = l.events()
		require.Len(t, evs, 5)
		assert.Equal(t, "released", evs[4].what)
		assert.Equal(t, "first", evs[4].mark, "Released gets the context the hold was taken with")

		// Close ends a wait: ErrClosed.
		held, err = rival.lock(context.Background())
		require.NoError(t, err)
		var l2 obsLog
		c2 := e.client(t, WithObserver(l2.observer()))
		time.AfterFunc(150*time.Millisecond, func() { _ = c2.Close() })
		_, err = k.mine(t, c2, name).lock(marked("closed"))
		require.ErrorIs(t, err, ErrClosed)
		evs = l2.events()
		require.Len(t, evs, 1)
		assert.Equal(t, "failed", evs[0].what)
		assert.Equal(t, "closed", evs[0].mark)
		assert.ErrorIs(t, evs[0].e.Cause, ErrClosed)
		require.NoError(t, rival.unlock(held))
	})
}

// An Election's Campaign that ends without leading is a failed
// acquisition too.
func TestObserverCampaignFailed(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var l obsLog
		leader := e.client(t)
		lctx, err := leader.Election("obs:elect").Campaign(context.Background(), "a")
		require.NoError(t, err)
		c := e.client(t, WithObserver(l.observer()))
		ctx, cancel := context.WithTimeout(marked("campaign"), 150*time.Millisecond)
		defer cancel()
		_, err = c.Election("obs:elect").Campaign(ctx, "b")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		evs := l.events()
		require.Len(t, evs, 1)
		assert.Equal(t, "failed", evs[0].what)
		assert.Equal(t, KindElection, evs[0].e.Kind)
		assert.Equal(t, "campaign", evs[0].mark)
		assert.ErrorIs(t, evs[0].e.Cause, context.DeadlineExceeded)
		assert.GreaterOrEqual(t, evs[0].e.Wait, 150*time.Millisecond)
		require.NoError(t, leader.Election("obs:elect").Resign(lctx))
	})
}

// LeaseLost gets the context the hold was taken with.
func TestObserverLeaseLostContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var l obsLog
		c := e.client(t, WithObserver(l.observer()), WithWatchdogTimeout(300*time.Millisecond))
		hctx, err := c.Mutex("obs:lost").Lock(marked("taken"))
		require.NoError(t, err)
		require.NoError(t, e.rdb(t).Del(context.Background(), "obs:lost").Err())
		<-hctx.Done()
		eventually(t, time.Second, "LeaseLost", func() bool { return len(l.events()) == 2 })
		ev := l.events()[1]
		assert.Equal(t, "lost", ev.what)
		assert.Equal(t, "taken", ev.mark)
		assert.ErrorIs(t, ev.e.Cause, ErrLeaseLost)
	})
}

// WithObserver given twice tells both observers, in order.
func TestObserverTwiceTellsBoth(t *testing.T) {
	e := miniEnv(t)
	var mu sync.Mutex
	var order []string
	note := func(who string) *Observer {
		return &Observer{Acquired: func(context.Context, HoldEvent) { mu.Lock(); order = append(order, who); mu.Unlock() }}
	}
	c := e.client(t, WithObserver(note("first")), WithObserver(&Observer{}), WithObserver(note("second")))
	m := c.Mutex("obs:twice")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"first", "second"}, order)
}

// A subscription connection killed by Redis (CLIENT KILL TYPE pubsub) is
// told lost once, then restored once go-redis has subscribed again, and the
// waiter is still woken by the unlock.
func TestObserverSubscriptionKilled(t *testing.T) {
	t.Parallel() // its own server, mostly waiting
	e := realEnv(t)
	ctx := context.Background()
	var l obsLog
	holder := e.client(t)
	waiter := e.client(t, WithObserver(l.observer()))
	const name = "obs:killed"
	hold, err := holder.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := faultLockAsync(wctx, waiter.Mutex(name))
	admin := e.rdb(t)
	eventually(t, 2*time.Second, "the waiter subscribed", func() bool {
		return faultNumSub(t, admin, faultMutexChannel(name)) == 1
	})
	subs, _ := l.subscription()
	require.Empty(t, subs, "nothing lost yet")

	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	eventually(t, 5*time.Second, "lost, then restored", func() bool {
		subs, _ := l.subscription()
		return len(subs) == 2
	})
	time.Sleep(100 * time.Millisecond)
	subs, evs := l.subscription()
	require.Equal(t, []string{"lost", "restored"}, subs)
	assert.Equal(t, "", evs[0].Node, "classic mode's one connection")
	assert.Error(t, evs[0].Err)
	assert.Greater(t, evs[1].Down, time.Duration(0))
	assert.Less(t, evs[1].Down, 5*time.Second)

	require.NoError(t, holder.Mutex(name).Unlock(hold))
	r := <-done
	require.NoError(t, r.err)
	require.NoError(t, waiter.Mutex(name).Unlock(r.hctx))
}

// A write on the subscription connection that fails counts as a lost
// connection (go-redis replaces it), even when the reader never sees the
// old one fail: here an UNSUBSCRIBE stalls past the write deadline while a
// message draws the reader away (see
// TestSubscriptionReplacedUnseenBySilentWriteFailure). It is told lost,
// then restored when the new connection answers.
func TestObserverSubscriptionWriteFailed(t *testing.T) {
	t.Parallel() // its own server, mostly waiting
	e := realEnv(t)
	ctx := context.Background()
	admin := e.rdb(t)
	var l obsLog
	holder := e.client(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr, WriteTimeout: 100 * time.Millisecond})
	waiter := newClient(t, rdb, WithObserver(l.observer()))
	const gone, kept = "obs:gone", "obs:kept"
	goneHold, err := holder.Mutex(gone).Lock(ctx)
	require.NoError(t, err)
	keptHold, err := holder.Mutex(kept).Lock(ctx)
	require.NoError(t, err)
	kctx, kcancel := context.WithCancel(ctx)
	kdone := faultLockAsync(kctx, waiter.Mutex(kept))
	gctx, gcancel := context.WithCancel(ctx)
	gdone := faultLockAsync(gctx, waiter.Mutex(gone))
	eventually(t, 2*time.Second, "both channels subscribed", func() bool {
		return faultNumSub(t, admin, faultMutexChannel(gone)) == 1 && faultNumSub(t, admin, faultMutexChannel(kept)) == 1
	})

	stall := h.OnWrite(faultproxy.WriteRule{Name: "UNSUBSCRIBE", Times: 1, Action: faultproxy.DelayWrite(400 * time.Millisecond)})
	gcancel()
	require.ErrorIs(t, (<-gdone).err, context.Canceled)
	eventually(t, time.Second, "the UNSUBSCRIBE written", func() bool { return stall.Fired() == 1 })
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, admin.Publish(ctx, faultMutexChannel(kept), "wake").Err())
	eventually(t, 5*time.Second, "lost, then restored", func() bool {
		subs, _ := l.subscription()
		return len(subs) == 2
	})
	time.Sleep(100 * time.Millisecond)
	subs, evs := l.subscription()
	require.Equal(t, []string{"lost", "restored"}, subs)
	assert.Error(t, evs[0].Err)

	require.NoError(t, holder.Mutex(kept).Unlock(keptHold))
	r := <-kdone
	require.NoError(t, r.err, "the waiter is woken on the new connection")
	require.NoError(t, waiter.Mutex(kept).Unlock(r.hctx))
	kcancel()
	require.NoError(t, holder.Mutex(gone).Unlock(goneHold))
}

// PubSubAuto's detection on a Cluster tells the mode it settles, once; a
// mode chosen, or a single node, changes nothing.
func TestObserverPubSubModeChanged(t *testing.T) {
	cl := sharedCluster(t)
	var l obsLog
	c := newClient(t, cl.Client(t), WithObserver(l.observer()))
	require.Equal(t, PubSubSharded, c.PubSub())
	l.mu.Lock()
	assert.Equal(t, []PubSubModeEvent{{From: PubSubAuto, To: PubSubSharded}}, l.modes)
	l.mu.Unlock()

	var fixed obsLog
	newClient(t, cl.Client(t), WithPubSub(PubSubClassic), WithObserver(fixed.observer()))
	newClient(t, miniEnv(t).rdb(t), WithObserver(fixed.observer()))
	assert.Empty(t, fixed.modes)
}

// HoldEvent.Outcome of a failed wait follows its error, wrapped or not.
func TestWaitOutcome(t *testing.T) {
	for err, want := range map[error]Outcome{
		nil:                                 OutcomeAcquired,
		ErrNotAcquired:                      OutcomeNotAcquired,
		context.Canceled:                    OutcomeCanceled,
		context.DeadlineExceeded:            OutcomeDeadlineExceeded,
		ErrClosed:                           OutcomeClosed,
		ErrNotReplicated:                    OutcomeError,
		fmt.Errorf("x: %w", ErrNotAcquired): OutcomeNotAcquired,
	} {
		assert.Equal(t, want, waitOutcome(err), "%v", err)
	}
}
