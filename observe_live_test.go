package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// liveKey marks the values an Observer adds: "wait" (WaitStarted) or
// "hold" (HoldStarted).
type liveKey struct{}

// cmdLog is a go-redis hook that records, for each command, the liveKey
// and obsKey values of the context it was sent with.
type cmdLog struct {
	mu   sync.Mutex
	cmds []cmdSeen
}

type cmdSeen struct{ name, live, mark string }

func (l *cmdLog) note(ctx context.Context, cmds ...redis.Cmder) {
	live, _ := ctx.Value(liveKey{}).(string)
	mark, _ := ctx.Value(obsKey{}).(string)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		l.cmds = append(l.cmds, cmdSeen{c.Name(), live, mark})
	}
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { l.note(ctx, cmd); return next(ctx, cmd) }
}

func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { l.note(ctx, cmds...); return next(ctx, cmds) }
}

// live returns the commands recorded with live's mark.
func (l *cmdLog) live(live string) []cmdSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []cmdSeen
	for _, c := range l.cmds {
		if c.live == live {
			out = append(out, c)
		}
	}
	return out
}

// liveObserver adds "wait" to a wait's context and "hold" to a hold's, in
// contexts it has cancelled (only their values may count), and records
// what each event's context carried as "event:live:mark".
type liveObserver struct {
	mu     sync.Mutex
	events []string
}

func (o *liveObserver) observer() *Observer {
	note := func(what string) func(context.Context, HoldEvent) {
		return func(ctx context.Context, _ HoldEvent) {
			live, _ := ctx.Value(liveKey{}).(string)
			mark, _ := ctx.Value(obsKey{}).(string)
			o.mu.Lock()
			o.events = append(o.events, what+":"+live+":"+mark)
			o.mu.Unlock()
		}
	}
	start := func(what, value string) func(context.Context, HoldEvent) context.Context {
		return func(ctx context.Context, e HoldEvent) context.Context {
			note(what)(ctx, e)
			c, cancel := context.WithCancel(context.WithValue(ctx, liveKey{}, value))
			cancel()
			return c
		}
	}
	return &Observer{
		WaitStarted: start("waitStarted", "wait"), Acquired: note("acquired"), AcquireFailed: note("failed"),
		HoldStarted: start("holdStarted", "hold"), Released: note("released"), LeaseLost: note("lost"),
	}
}

func (o *liveObserver) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.events...)
}

// WaitStarted's context goes with the wait: the Redis commands of a
// contended wait carry its values (the caller's too), and so does the
// context Acquired or AcquireFailed gets. HoldStarted's goes with the
// hold: the hold's context carries its values, and Released gets it. Only
// values: the contexts the observer returned were cancelled, and neither
// the wait nor the hold ended by it; a bounded wait ends at its bound.
func TestObserverLiveContexts(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		var o liveObserver
		var cmds cmdLog
		rdb := e.rdb(t)
		gate(rdb, &cmds)
		c := newClient(t, rdb, WithObserver(o.observer()))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		rival := k.rival(t, e.client(t), name)
		held, err := rival.lock(context.Background())
		require.NoError(t, err)

		// A bounded wait ends at its bound, not with the cancelled context.
		start := time.Now()
		_, err = mine.tryFor(marked("call"), 150*time.Millisecond)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond-obsStartSlack)
		assert.Equal(t, []string{"waitStarted::call", "failed:wait:call"}, o.seen())

		// A wait that gets the lock once the rival lets it go.
		got := make(chan error, 1)
		var hctx context.Context
		go func() {
			var err error
			hctx, err = mine.lock(marked("call"))
			got <- err
		}()
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, rival.unlock(held))
		require.NoError(t, <-got)
		waited := cmds.live("wait")
		assert.GreaterOrEqual(t, len(waited), 2, "the attempts before and after the wake-up carry the wait's values: %v", waited)
		for _, cmd := range waited {
			assert.Equal(t, "call", cmd.mark, "a command of the wait lost the caller's values")
		}
		assert.Equal(t, []string{"waitStarted::call", "failed:wait:call", "waitStarted::call", "acquired:wait:call",
			"holdStarted::call"}, o.seen())

		assert.Equal(t, "hold", hctx.Value(liveKey{}), "the hold's context carries HoldStarted's values")
		assert.Equal(t, "call", hctx.Value(obsKey{}), "and the caller's")
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, hctx.Err(), "the hold ended with HoldStarted's cancelled context")
		assert.Equal(t, 1, mine.count(hctx))
		require.NoError(t, mine.unlock(hctx))
		assert.Equal(t, "released:hold:call", o.seen()[5])
	})
}

// A hold that ends while HoldStarted is being told (its context ends
// then) is reported ended only after HoldStarted has returned, with the
// context HoldStarted returned: an observer never closes a span it has
// not opened yet.
func TestObserverEndWaitsForHoldStarted(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var mu sync.Mutex
		var order []string
		note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := e.client(t, WithObserver(&Observer{
			HoldStarted: func(ctx context.Context, _ HoldEvent) context.Context {
				cancel() // the hold ends with ctx, in another goroutine
				time.Sleep(100 * time.Millisecond)
				note("holdStarted")
				return context.WithValue(ctx, liveKey{}, "hold")
			},
			Released: func(ctx context.Context, _ HoldEvent) {
				live, _ := ctx.Value(liveKey{}).(string)
				note("released:" + live)
			},
		}))
		m := c.Mutex("obs:during")
		if hctx, err := m.Lock(ctx); err == nil {
			<-hctx.Done()
		}
		eventually(t, 2*time.Second, "Released", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 2 })
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"holdStarted", "released:hold"}, order)
	})
}

// WithObserver given twice chains WaitStarted and HoldStarted: each gets
// the context the one before returned (nil: the one it was given).
func TestObserverStartsChain(t *testing.T) {
	e := miniEnv(t)
	type key string
	add := func(k key) func(context.Context, HoldEvent) context.Context {
		return func(ctx context.Context, _ HoldEvent) context.Context { return context.WithValue(ctx, k, true) }
	}
	var mu sync.Mutex
	var seen []bool
	c := e.client(t,
		WithObserver(&Observer{WaitStarted: add("w1"), HoldStarted: add("h1")}),
		WithObserver(&Observer{WaitStarted: func(context.Context, HoldEvent) context.Context { return nil },
			HoldStarted: func(context.Context, HoldEvent) context.Context { return nil }}),
		WithObserver(&Observer{WaitStarted: add("w2"), HoldStarted: add("h2"),
			Acquired: func(ctx context.Context, _ HoldEvent) {
				mu.Lock()
				seen = append(seen, ctx.Value(key("w1")) != nil, ctx.Value(key("w2")) != nil)
				mu.Unlock()
			}}))
	m := c.Mutex("obs:chain")
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	assert.Equal(t, true, hctx.Value(key("h1")))
	assert.Equal(t, true, hctx.Value(key("h2")))
	assert.Nil(t, hctx.Value(key("w1")), "the hold's context does not carry the wait's values")
	require.NoError(t, m.Unlock(hctx))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []bool{true, true}, seen)
}

// An Election's Campaign is a wait and a leadership a hold, as for the
// locks: the campaign's commands carry WaitStarted's values, the
// leadership's context HoldStarted's, and the end is told with them.
func TestObserverLiveContextsElection(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var o liveObserver
		var cmds cmdLog
		rdb := e.rdb(t)
		gate(rdb, &cmds)
		c := newClient(t, rdb, WithObserver(o.observer()))
		leader := e.client(t).Election("obs:live-elect")
		held, err := leader.Campaign(context.Background(), "a")
		require.NoError(t, err)
		time.AfterFunc(150*time.Millisecond, func() { _ = leader.Resign(held) })
		el := c.Election("obs:live-elect")
		lctx, err := el.Campaign(marked("call"), "b")
		require.NoError(t, err)
		assert.GreaterOrEqual(t, len(cmds.live("wait")), 2, "the campaign's attempts carry the wait's values")
		assert.Equal(t, "hold", lctx.Value(liveKey{}))
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, lctx.Err())
		require.NoError(t, el.Resign(lctx))
		assert.Equal(t, []string{"waitStarted::call", "acquired:wait:call", "holdStarted::call", "released:hold:call"}, o.seen())
	})
}
