package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// The keeper on its own, against a real server: holds are plain Redis
// hashes with one owner field, renewed by lua/renew.lua and given up by
// lua/drop.lua, as a Mutex's are; the callbacks record what they are told.

var (
	errLost       = errors.New("test: lease lost")
	errClosed     = errors.New("test: closed")
	errClosedHold = errors.New("test: closed hold")
	errUntrusted  = errors.New("test: untrusted")
	bg            = context.Background()
)

type env struct {
	rdb    *redis.Client
	hook   *faultproxy.Hook // on the transport's calls
	tr     *transport.Transport
	k      *Keeper
	closed chan struct{}

	mu     sync.Mutex
	ended  map[*Hold]EndReason
	given  []*Hold
	rounds []Round
}

func newEnv(t *testing.T, lease time.Duration) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{rdb: srv.Client(t), hook: faultproxy.NewHook(), closed: make(chan struct{}), ended: map[*Hold]EndReason{}}
	e.tr = transport.New(e.rdb, transport.Options{Publish: func() string { return "publish" },
		ReleaseTimeout: 5 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: []redis.Hook{e.hook}})
	t.Cleanup(func() { e.tr.Close(); e.tr.Drain(5 * time.Second) })
	e.k = New(Config{
		Transport: e.tr, Lease: lease, Closed: e.closed, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		GiveBack: func(h *Hold) { e.mu.Lock(); e.given = append(e.given, h); e.mu.Unlock() },
		Ended:    func(h *Hold, why EndReason, _ error) { e.mu.Lock(); e.ended[h] = why; e.mu.Unlock() },
		Renewed:  func(r Round) { e.mu.Lock(); e.rounds = append(e.rounds, r); e.mu.Unlock() },
		Errors:   Errors{Lost: errLost, Closed: errClosed, ClosedHold: errClosedHold, Untrusted: errUntrusted},
	})
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	select {
	case <-e.closed:
	default:
		close(e.closed)
		e.k.Close(time.Now().Add(5 * time.Second))
	}
}

func (e *env) endOf(h *Hold) (EndReason, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	why, ok := e.ended[h]
	return why, ok
}

// hold takes key in Redis for field with lease d and registers its hold.
func (e *env) hold(t *testing.T, key string, d time.Duration, renewed bool) *Hold {
	t.Helper()
	return e.holdSent(t, key, d, renewed, time.Now())
}

// holdSent is hold for a script sent at sent (its reply came late).
func (e *env) holdSent(t *testing.T, key string, d time.Duration, renewed bool, sent time.Time) *Hold {
	t.Helper()
	st := Stamp{Sent: sent, Epoch: e.k.Epoch(Ref{Owner: e, Kind: "test", Name: key}, nil)}
	require.NoError(t, e.rdb.HSet(bg, key, "owner", 1).Err())
	require.NoError(t, e.rdb.PExpire(bg, key, d).Err())
	h := &Hold{Ref: Ref{Owner: e, Kind: "test", Name: key}, Field: "owner", Lease: d, Renewed: renewed,
		Parent: bg, Count: 1, Taken: time.Now()}
	h.One = [2]transport.Call{
		{Script: lua.Renew, Keys: []string{key}, Args: []any{"owner", d.Milliseconds()}},
		{Script: lua.Drop, Keys: []string{key}, Args: []any{"owner", transport.Publish, "0", key + ":ch"}},
	}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	require.NoError(t, e.k.Add(h, st))
	return h
}

func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	require.Eventually(t, f, d, 5*time.Millisecond, what)
}

// A renewed hold's lease is kept in Redis past its first term, in rounds
// every third of the lease, and its context stays live.
func TestRenewalKeepsTheLease(t *testing.T) {
	e := newEnv(t, 600*time.Millisecond)
	h := e.hold(t, "l:renew", 600*time.Millisecond, true)
	time.Sleep(1800 * time.Millisecond)
	require.NoError(t, h.Ctx.Err(), "the hold ended although its lease was renewed")
	assert.EqualValues(t, 1, e.rdb.Exists(bg, "l:renew").Val(), "the lease ran out in Redis")
	e.mu.Lock()
	assert.GreaterOrEqual(t, len(e.rounds), 2, "renewal rounds")
	e.mu.Unlock()
	assert.Greater(t, h.Left(), 200*time.Millisecond, "the local deadline moved with the renewals")
}

// A hold granted by a reply that came late, when most of its lease (as
// counted from the script's sending) had passed, is renewed at once rather
// than at its cadence's next round, which would come after its deadline:
// a waiter whose attempt sat in a paused Redis's socket got such a grant
// and lost it 50ms later, with its lease in Redis intact. Alone and beside
// a hold whose round has just been set.
func TestLateGrantRenewedBeforeItsDeadline(t *testing.T) {
	const d = 900 * time.Millisecond
	for _, beside := range []bool{false, true} {
		e := newEnv(t, d)
		if beside {
			e.hold(t, "l:beside", d, true) // its cadence's next round: d/3 from now
		}
		h := e.holdSent(t, "l:late", d, true, time.Now().Add(-d*3/4))
		time.Sleep(d / 2) // past the late hold's first deadline, before the round
		require.NoError(t, h.Ctx.Err(), "beside=%v: the late grant was lost at its first deadline instead of being renewed", beside)
		assert.Greater(t, h.Left(), d/3, "beside=%v: the local deadline moved with a renewal", beside)
		e.close()
	}
}

// The same late grant added while a round is under way (after the round
// took its holds): the round's end, which sets its cadence's next round a
// third of the lease after its start, does not undo the earlier round the
// grant needs. A renewal round that started during a pause answers at the
// resume, with the late grants of that pause.
func TestLateGrantDuringARoundRenewedBeforeItsDeadline(t *testing.T) {
	const d = 900 * time.Millisecond
	e := newEnv(t, d)
	hook := e.hook
	slow := hook.OnCommand(faultproxy.CommandRule{Times: 1, Action: faultproxy.DelayReply(100 * time.Millisecond),
		Args: func(a []any) bool { return len(a) > 3 && a[3] == "l:beside" }})
	e.hold(t, "l:beside", d, true) // its first round d/3 from now, its reply 100ms late
	eventually(t, 2*time.Second, "the round started", func() bool { return slow.Fired() > 0 })
	time.Sleep(20 * time.Millisecond)
	h := e.holdSent(t, "l:late", d, true, time.Now().Add(-d*3/4))
	time.Sleep(d / 2)
	require.NoError(t, h.Ctx.Err(), "a late grant added during a round was lost at its first deadline")
}

// A hold added while a round is under way for its lease's cadence, after
// that round found no hold of it (the cadence ends with the round), starts
// the cadence again: it is renewed. The round is slow because it renews
// another lease's hold too.
func TestHoldAddedDuringARoundThatEndsItsCadence(t *testing.T) {
	const long, short = 900 * time.Millisecond, 600 * time.Millisecond
	e := newEnv(t, long)
	hook := e.hook
	slow := hook.OnCommand(faultproxy.CommandRule{Times: 1, Action: faultproxy.DelayReply(150 * time.Millisecond),
		Args: func(a []any) bool { return len(a) > 3 && a[3] == "l:a" }})
	x := e.hold(t, "l:x", short, true) // its cadence's round: short/3 from now
	e.hold(t, "l:a", long, true)       // long/3 from now: near enough to join that round
	e.k.End(x, EndUnlocked, nil)       // the round will find no hold of short
	eventually(t, 2*time.Second, "the round started", func() bool { return slow.Fired() > 0 })
	y := e.hold(t, "l:y", short, true) // while the round waits for l:a's reply
	time.Sleep(short + short/3)
	require.NoError(t, y.Ctx.Err(), "a hold added during the round that ended its cadence was never renewed")
}

// Grants that came a little late but with most of their lease ahead do not
// add rounds: 50 holds of a 900ms lease, one replaced every 2ms by a grant
// whose reply took a quarter of its lease, are renewed in about three
// rounds per lease (an earlier version pulled the cadence for each of
// them: about 1,000 rounds in 3s). The lease is long enough that a round
// a loaded machine runs late still comes before the deadline.
func TestSlightlyLateGrantsAddNoRounds(t *testing.T) {
	const d = 900 * time.Millisecond
	e := newEnv(t, d)
	ring := make([]*Hold, 50)
	for end, i := time.Now().Add(3*time.Second), 0; time.Now().Before(end); i++ {
		if old := ring[i%50]; old != nil {
			e.k.End(old, EndLost, errLost)
		}
		ring[i%50] = e.holdSent(t, fmt.Sprintf("l:c%d", i%50), d, true, time.Now().Add(-d/4))
		time.Sleep(2 * time.Millisecond)
	}
	e.mu.Lock()
	n := len(e.rounds)
	e.mu.Unlock()
	t.Logf("rounds in 3s: %d (about 10 expected)", n)
	assert.LessOrEqual(t, n, 60, "renewal rounds in 3s of a 900ms lease")
	for _, h := range ring {
		assert.NoError(t, h.Ctx.Err(), "a hold of the ring was lost")
	}
}

// Grants whose reply took more than half their lease, one every 2ms, are
// each renewed in time, by rounds that serve many of them: the round a
// late grant needs (a sixth of its lease before its deadline) is waited
// for, not run at once because it is within the slack by which cadences
// join a round due (an earlier version ran a round per grant: about 1,050
// in 3s). The lease is 900ms: at 300ms the round came 50ms before the
// deadline, and a loaded CI machine once ran it too late for two holds.
func TestVeryLateGrantsShareRounds(t *testing.T) {
	const d = 900 * time.Millisecond
	e := newEnv(t, d)
	ring := make([]*Hold, 50)
	grants := 0
	for end, i := time.Now().Add(3*time.Second), 0; time.Now().Before(end); i++ {
		if old := ring[i%50]; old != nil {
			e.k.End(old, EndUnlocked, nil)
		}
		ring[i%50] = e.holdSent(t, fmt.Sprintf("l:v%d", i%50), d, true, time.Now().Add(-d*6/10))
		grants++
		time.Sleep(2 * time.Millisecond)
	}
	e.mu.Lock()
	n := len(e.rounds)
	e.mu.Unlock()
	t.Logf("%d grants, %d rounds in 3s", grants, n)
	for _, h := range ring {
		assert.NoError(t, h.Ctx.Err(), "a hold of the ring was lost")
	}
	assert.LessOrEqual(t, n, 160, "renewal rounds in 3s of a 900ms lease")
}

// A hold whose key Redis lost is ended as lost at the next round, its
// context cancelled with Errors.Lost, and the owner told.
func TestLostInRedisEndsTheHold(t *testing.T) {
	e := newEnv(t, 300*time.Millisecond)
	h := e.hold(t, "l:lost", 300*time.Millisecond, true)
	require.NoError(t, e.rdb.Del(bg, "l:lost").Err())
	select {
	case <-h.Ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the hold outlived its key by two rounds")
	}
	assert.ErrorIs(t, context.Cause(h.Ctx), errLost)
	why, ok := e.endOf(h)
	require.True(t, ok, "the owner was not told")
	assert.Equal(t, EndLost, why)
	assert.Equal(t, EndLost, h.Reason())
}

// A fixed lease (not renewed) ends at its local deadline, before Redis
// lets it expire: the holder is told first.
func TestFixedLeaseEndsBeforeRedisExpiresIt(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	// A 1s lease: its margin (100ms) leaves room for a loaded machine
	// between the hold's end and the EXISTS below.
	h := e.hold(t, "l:fixed", time.Second, false)
	<-h.Ctx.Done()
	assert.EqualValues(t, 1, e.rdb.Exists(bg, "l:fixed").Val(), "Redis let the lease expire before the holder was told")
	assert.ErrorIs(t, context.Cause(h.Ctx), errLost)
	eventually(t, time.Second, "given back", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.given) == 1
	})
}

// A grant stamped before a ForceUnlock of its lock is refused (the
// ForceUnlock may have freed it after its script ran), and so is one
// stamped while the ForceUnlock is in flight; Force ends the live holds
// of the lock at once.
func TestForceMakesEarlierGrantsUntrusted(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	ref := Ref{Owner: e, Kind: "test", Name: "l:force"}
	held := e.hold(t, "l:force", 30*time.Second, true)
	before := e.k.Epoch(ref, nil)
	done := e.k.Force(ref)
	assert.Error(t, held.Ctx.Err(), "a hold of the forced lock lives on")
	assert.ErrorIs(t, context.Cause(held.Ctx), errLost)
	_, ok, err := e.k.Unforced(bg, ref, nil, false)
	require.NoError(t, err)
	assert.False(t, ok, "a grant is trusted while the ForceUnlock is in flight")
	h := &Hold{Ref: ref, Field: "other", Lease: time.Second, Parent: bg}
	assert.ErrorIs(t, e.k.Add(h, Stamp{Sent: time.Now(), Epoch: before}), errUntrusted)
	assert.Error(t, h.Ctx.Err(), "a refused hold's context is live")
	done()
	epoch, ok, err := e.k.Unforced(bg, ref, nil, false)
	require.NoError(t, err)
	require.True(t, ok)
	assert.NotEqual(t, before, epoch)
	h2 := &Hold{Ref: ref, Field: "other", Lease: time.Second, Parent: bg}
	assert.ErrorIs(t, e.k.Add(h2, Stamp{Sent: time.Now(), Epoch: before}), errUntrusted, "stamped before, answered after")
	h3 := &Hold{Ref: ref, Field: "other", Lease: time.Second, Parent: bg}
	require.NoError(t, e.k.Add(h3, Stamp{Sent: time.Now(), Epoch: epoch}))
	e.k.End(h3, EndUnlocked, nil)
}

// Close ends every hold (cause Errors.ClosedHold), releases them in Redis,
// and refuses new ones.
func TestCloseEndsAndReleases(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.hold(t, "l:close", 30*time.Second, true)
	e.close()
	assert.ErrorIs(t, context.Cause(h.Ctx), errClosedHold)
	assert.EqualValues(t, 0, e.rdb.Exists(bg, "l:close").Val(), "Close left the hold in Redis")
	h2 := &Hold{Ref: Ref{Owner: e, Kind: "test", Name: "x"}, Lease: time.Second, Parent: bg}
	assert.ErrorIs(t, e.k.Add(h2, Stamp{Sent: time.Now()}), errClosed)
}

// The contexts a hold hands out end with it: its own, those derived from
// it, and a re-entry's made from another context (ContextFor).
func TestContextForEndsWithTheHold(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.hold(t, "l:ctx", 30*time.Second, true)
	type key struct{}
	vctx := context.WithValue(h.Ctx, key{}, 1)
	assert.Equal(t, vctx, h.ContextFor(vctx), "a context derived by values is the hold's own")
	other, cancel := context.WithCancel(bg)
	defer cancel()
	rctx := h.ContextFor(other)
	require.NoError(t, rctx.Err())
	e.k.End(h, EndUnlocked, context.Canceled)
	assert.Error(t, rctx.Err(), "a re-entry's context outlived the hold")
	assert.Error(t, vctx.Err())
}

// endingCtx ends a hold in the middle of its first Err, after reading
// that it is live: what another goroutine (the hold's timer, on a process
// that resumed from a stop) may do between two instructions.
type endingCtx struct {
	context.Context
	end func()
}

func (c *endingCtx) Err() error {
	err := c.Context.Err()
	if c.end != nil {
		c.end()
		c.end = nil
	}
	return err
}

// loseNow ends h as lost, as its timer does.
func loseNow(e *env, h *Hold) { e.k.End(h, EndLost, errLost) }

// A hold context's Err never says live once it has seen the hold end: a
// hold that ends while Err runs (its end cancels the context, then clears
// the deadline) must not be reported live because its deadline is gone.
// This happened with a downgrade's context on resuming from a stop (1 run
// of TestPausedHolderIsToldAtOnce in about 20).
func TestHoldCtxErrSeesAnEndDuringTheCall(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.hold(t, "holdctx:end", 30*time.Second, true)
	other, cancel := context.WithCancel(bg)
	defer cancel()
	inner := h.ContextFor(other).(*holdCtx).Context // a re-entry's
	tctx := &holdCtx{Context: &endingCtx{Context: inner, end: func() { loseNow(e, h) }}, h: h}
	assert.Error(t, tctx.Err(), "the hold ended during Err: it is not live")
	assert.ErrorIs(t, context.Cause(h.Ctx), errLost)
	assert.Error(t, h.Ctx.Err())
}

// A hold whose deadline has passed is not reported live while another
// goroutine is ending it: its timer, on a process that resumed from a
// stop, may be preempted in the middle of the end's firsts (a downgrade's
// check), and the holder's goroutine must not read "live" meanwhile.
func TestHoldCtxErrWhileAnotherGoroutineEndsIt(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.hold(t, "holdctx:firsts", 30*time.Second, true)
	lctx := h.Ctx
	inFirst, release := make(chan struct{}), make(chan struct{})
	h.First(func() { close(inFirst); <-release })
	h.dl.set(time.Now().Add(-time.Millisecond)) // as after a stop
	go loseNow(e, h)
	<-inFirst
	got := make(chan error, 1)
	go func() { got <- lctx.Err() }()
	select {
	case err := <-got:
		// It may answer at once, but not "live", and not "ended" with
		// Done still open.
		assert.Error(t, err, "Err said live while the hold was being ended")
		select {
		case <-lctx.Done():
		default:
			t.Error("Err said ended with Done still open")
		}
		close(release)
		return
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	assert.Error(t, <-got, "the hold ended: not live")
	assert.ErrorIs(t, context.Cause(lctx), errLost)
}

// A hold's context carries its hold, for the contexts derived from it too
// (a nested Lock re-enters with them); a re-entry's context carries the
// hold as well. HoldIn finds it, or finds none, without an allocation (an
// Unlock looks its hold up every time, and a Lock looks for one to
// re-enter, in a context that most often carries none).
func TestHoldContextCarriesItsHold(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.hold(t, "l:carry", 30*time.Second, true)
	other := e.hold(t, "l:carry:other", 30*time.Second, true)

	type key struct{}
	derived, cancel := context.WithTimeout(context.WithValue(h.Ctx, key{}, 1), time.Minute)
	defer cancel()
	assert.Same(t, h, HoldIn(h.Ctx, h.Ref))
	assert.Same(t, h, HoldIn(derived, h.Ref))
	assert.Nil(t, HoldIn(h.Ctx, other.Ref), "another lock's hold")
	assert.Nil(t, HoldIn(bg, h.Ref))
	assert.Same(t, h, HoldIn(h.ContextFor(other.Ctx), h.Ref), "a re-entry's context")
	assert.Same(t, other, HoldIn(h.ContextFor(other.Ctx), other.Ref), "a re-entry's context keeps its parent's values")

	assert.Same(t, h, HoldIn(context.WithValue(h.ContextFor(other.Ctx), key{}, 2), h.Ref), "a context derived from a re-entry's")
	assert.Same(t, other, HoldIn(context.WithValue(h.ContextFor(other.Ctx), key{}, 2), other.Ref), "below it")

	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = HoldIn(h.Ctx, h.Ref) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = HoldIn(derived, h.Ref) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = HoldIn(bg, h.Ref) }))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = HoldIn(derived, other.Ref) }))
}

// holdOn registers a hold of key taken with parent, without Redis: what
// its context does is the keeper's alone.
func (e *env) holdOn(t *testing.T, key string, parent context.Context) *Hold {
	t.Helper()
	ref := Ref{Owner: e, Kind: "test", Name: key}
	h := &Hold{Ref: ref, Field: "owner", Lease: 30 * time.Second, Renewed: true, Parent: parent, Count: 1, Taken: time.Now()}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	require.NoError(t, e.k.Add(h, Stamp{Sent: time.Now(), Epoch: e.k.Epoch(ref, nil)}))
	return h
}

// A hold's own context is part of the hold: it carries the parent's
// values and deadline, and ends with the parent as a child of it would,
// at once when one of its methods finds the parent ended (the parent's
// cause, and DeadlineExceeded when its deadline passed); what is derived
// from it ends with it, with its cause; a lost hold's cause is the loss.
func TestOwnContextEndsWithItsParent(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	type key struct{}
	errStop := errors.New("test: the request ended")

	parent, cancel := context.WithCancelCause(context.WithValue(bg, key{}, "v"))
	h := e.holdOn(t, "own:parent", parent)
	assert.Equal(t, "v", h.Ctx.Value(key{}), "the caller's values")
	_, ok := h.Ctx.Deadline()
	assert.False(t, ok)
	derived, dcancel := context.WithCancel(context.WithValue(h.Ctx, key{}, "w"))
	defer dcancel()
	ran := make(chan struct{})
	context.AfterFunc(h.Ctx, func() { close(ran) })
	require.NoError(t, h.Ctx.Err())
	select {
	case <-h.Ctx.Done():
		t.Fatal("done while its parent lives")
	default:
	}
	cancel(errStop)
	assert.ErrorIs(t, h.Ctx.Err(), context.Canceled, "at once: no watcher has run")
	assert.ErrorIs(t, context.Cause(h.Ctx), errStop)
	<-h.Ctx.Done()
	why, _ := e.endOf(h)
	assert.Equal(t, EndParent, why)
	eventually(t, time.Second, "given back", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return slices.Contains(e.given, h)
	})
	assert.ErrorIs(t, derived.Err(), context.Canceled, "derived from it")
	assert.ErrorIs(t, context.Cause(derived), errStop)
	<-ran

	dctx, dcancel2 := context.WithTimeout(bg, 20*time.Millisecond)
	defer dcancel2()
	h2 := e.holdOn(t, "own:deadline", dctx)
	dl, ok := h2.Ctx.Deadline()
	assert.True(t, ok)
	want, _ := dctx.Deadline()
	assert.Equal(t, want, dl, "the parent's deadline")
	<-dctx.Done()
	assert.ErrorIs(t, h2.Ctx.Err(), context.DeadlineExceeded, "as a child of its parent would say")

	h3 := e.holdOn(t, "own:lost", bg)
	derived3, dcancel3 := context.WithCancel(h3.Ctx)
	defer dcancel3()
	assert.NotNil(t, h3.Ctx.Done(), "a Done to wait on")
	loseNow(e, h3)
	<-h3.Ctx.Done()
	assert.ErrorIs(t, h3.Ctx.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(h3.Ctx), errLost)
	assert.ErrorIs(t, context.Cause(derived3), errLost, "derived from it: the loss too")
	assert.NotNil(t, causeKey, "context.Cause asks for its key (a Go release that stops would lose the causes)")

	h4 := e.holdOn(t, "own:released", bg)
	e.k.End(h4, EndUnlocked, nil)
	assert.ErrorIs(t, context.Cause(h4.Ctx), context.Canceled, "released: no cause but the cancel")
}

// A hold's context and its place in the keeper cost no allocation: Add
// and End of a hold whose parent never ends allocate nothing once the
// keeper's table and heap have grown.
func TestAddAndEndAllocateNothing(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	ref := Ref{Owner: e, Kind: "test", Name: "own:allocs"}
	hs := make([]Hold, 300)
	i := 0
	add := func() {
		h := &hs[i]
		i++
		h.Ref, h.Field, h.Lease, h.Renewed, h.Parent, h.Count = ref, "owner", 30*time.Second, true, bg, 1
		h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
		if err := e.k.Add(h, Stamp{Sent: time.Now()}); err != nil {
			t.Fatal(err)
		}
		_ = h.Ctx.Err()
		e.k.EndUntold(h, EndUnlocked)
	}
	for range 100 {
		add()
	}
	assert.Zero(t, testing.AllocsPerRun(100, add))
}
