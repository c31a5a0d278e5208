package holds

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// The hold machinery on its own, against a real server, with a lock kept
// as a Mutex keeps it (a hash of owner field → count, lua/lock.lua,
// renew.lua, unlock.lua, drop.lua) but no Mutex: what the root's
// primitives promise is tested at the root.

var bg = context.Background()

type env struct {
	rdb   *redis.Client
	m     *Machine
	close func() // what the Client's Close does, once (also at the test's end)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, redistest.Start(t).Client(t))
}

// newEnvOn is newEnv on rdb.
func newEnvOn(t *testing.T, rdb *redis.Client) *env {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	closed := make(chan struct{})
	tr := transport.New(rdb, transport.Options{Publish: func() string { return "publish" }, ReleaseTimeout: ReleaseTimeout, Log: log})
	var m *Machine
	k := lease.New(lease.Config{Transport: tr, Lease: 3 * time.Second, Closed: closed, Log: log,
		GiveBack: func(h *lease.Hold) { m.GiveBack(h) },
		Ended:    func(*lease.Hold, lease.EndReason, error) {},
		Renewed:  func(lease.Round) {},
		Acked:    func(r transport.Reply) error { return m.RenewedAck(r) },
		Errors:   lease.Errors{Lost: errs.LeaseLost, Closed: errs.Closed, ClosedHold: errs.ClosedHold, Untrusted: ErrUntrusted}})
	q := cohort.NewQueue(errs.Closed)
	hub := notify.New(notify.Config{RDB: rdb, Closed: closed, ClosedErr: errs.Closed, Log: log,
		Mode: func(context.Context) (bool, bool) { return false, true }, Hold: q.ChanYielding})
	m = New(Config{ID: "test", Transport: tr, Keeper: k, Hub: hub, Queue: q, Closed: closed, Log: log})
	var once sync.Once
	shut := func() {
		once.Do(func() {
			deadline := time.Now().Add(ReleaseTimeout)
			close(closed)
			tr.Close()
			k.Close(deadline)
			hub.Close()
			m.Close(deadline)
			tr.Drain(time.Until(deadline))
		})
	}
	t.Cleanup(shut)
	return &env{rdb: rdb, m: m, close: shut}
}

// lock is a Mutex's scripts on key, without its handle.
type lock struct {
	key  string
	spec Spec
}

func newLock(key string, d time.Duration) *lock {
	return &lock{key: key, spec: Spec{Ref: lease.Ref{Kind: "test", Name: key}, Lease: d, Renewed: true, Counts: true, Wrap: func(err error) error { return err }}}
}

func (l *lock) acquire(field string, count int) call {
	return transport.Script(lua.Lock, []string{l.key}, l.spec.Lease.Milliseconds(), field, count)
}

func (l *lock) drop(field string) call {
	return transport.Script(lua.Drop, []string{l.key}, field, transport.Publish, "0", "ch:"+l.key)
}

func (l *lock) unlock(field string, count int) call {
	return transport.Script(lua.Unlock, []string{l.key}, field, count, l.spec.Lease.Milliseconds(), transport.Publish, "0", "ch:"+l.key)
}

// take makes a first acquisition of l that must be granted at once.
func (e *env) take(t *testing.T, l *lock, parent context.Context) context.Context {
	t.Helper()
	a := e.m.Begin(&l.spec, parent, parent, false, nil, l.drop)
	field, r, _, err := a.Send(func(field string) call { return l.acquire(field, 0) })
	require.NoError(t, err)
	require.Equal(t, int64(1), r[0], "granted")
	ok, _, err := a.Grant(field, int(r[1]), []call{transport.Script(lua.Renew, []string{l.key}, field, l.spec.Lease.Milliseconds())})
	a.Finish(err)
	require.NoError(t, err)
	require.True(t, ok)
	return a.HoldCtx
}

func (e *env) release(ctx context.Context, l *lock) error {
	return e.m.Release(ctx, &l.spec, 1, func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
		return e.m.ReleaseBy(ctx, l.unlock(h.Field, count))
	})
}

func (e *env) count(t *testing.T, l *lock, field string) int {
	t.Helper()
	n, err := e.rdb.HGet(bg, l.key, field).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// A hold made by Grant is carried by its context; Reenter counts once
// more in Redis and locally, Release gives the holds up one by one, and
// the last one ends the hold's context and deletes the key.
func TestGrantReenterRelease(t *testing.T) {
	e := newEnv(t)
	l := newLock("lock", 3*time.Second)
	hctx := e.take(t, l, bg)
	h := Held(hctx, l.spec.Ref)
	require.NotNil(t, h)
	assert.Equal(t, 1, e.count(t, l, h.Field))

	got, err := Entry(hctx, l.spec.Ref)
	require.NoError(t, err)
	require.Same(t, h, got, "a context carrying the hold re-enters it")
	rctx, err := e.m.Reenter(hctx, hctx, false, &l.spec, h, Reentry{
		Calls: func(count int) []call { return []call{l.acquire(h.Field, count)} },
		Undo:  func(n int) []call { return []call{l.unlock(h.Field, n)} },
	})
	require.NoError(t, err)
	assert.Equal(t, 2, h.Count)
	assert.Equal(t, 2, e.count(t, l, h.Field))

	require.NoError(t, e.release(rctx, l))
	assert.Equal(t, 1, e.count(t, l, h.Field))
	assert.NoError(t, hctx.Err(), "one hold remains")
	require.NoError(t, e.release(hctx, l))
	assert.Error(t, hctx.Err(), "the last release ends the hold's context")
	n, err := e.rdb.Exists(bg, l.key).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.ErrorIs(t, e.release(hctx, l), errs.NotHeld)

	e2, err := Entry(hctx, l.spec.Ref)
	assert.NoError(t, err)
	assert.Nil(t, e2, "after its last release, a context's hold is not re-entered: a new one is taken")
}

// A re-entry through a handle whose lease differs from the hold's is
// refused, and changes nothing in Redis.
func TestReenterRefusesAnotherLease(t *testing.T) {
	e := newEnv(t)
	l := newLock("lock", 3*time.Second)
	hctx := e.take(t, l, bg)
	h := Held(hctx, l.spec.Ref)
	other := *l
	other.spec.Lease = 4 * time.Second
	_, err := e.m.Reenter(hctx, hctx, false, &other.spec, h, Reentry{
		Calls: func(count int) []call { return []call{other.acquire(h.Field, count)} },
		Undo:  func(n int) []call { return []call{other.unlock(h.Field, n)} },
	})
	assert.ErrorIs(t, err, errs.Invalid)
	assert.Equal(t, 1, e.count(t, l, h.Field))
}

// A hold's context never outlives the context it was taken with: when
// the parent ends, the hold ends and Redis is given the lock back.
func TestHoldEndsWithItsParent(t *testing.T) {
	e := newEnv(t)
	l := newLock("lock", 3*time.Second)
	parent, cancel := context.WithCancel(bg)
	hctx := e.take(t, l, parent)
	cancel()
	<-hctx.Done()
	assert.Eventually(t, func() bool {
		n, err := e.rdb.Exists(bg, l.key).Result()
		return err == nil && n == 0
	}, 2*time.Second, 10*time.Millisecond, "given back")
	assert.NoError(t, e.release(hctx, l), "a release after the parent ended says nil: redisync released it")
}

// A grant whose script was sent longer ago than its lease cannot be
// trusted: no hold is made, the grant is given back, and the attempt goes
// on under a new owner.
func TestGrantUntrustedAfterItsLease(t *testing.T) {
	e := newEnv(t)
	l := newLock("lock", 100*time.Millisecond)
	a := e.m.Begin(&l.spec, bg, bg, true, nil, l.drop)
	field, r, _, err := a.Send(func(field string) call { return l.acquire(field, 0) })
	require.NoError(t, err)
	require.Equal(t, int64(1), r[0])
	a.St.Sent = time.Now().Add(-time.Second) // as if the reply had stalled
	ok, next, err := a.Grant(field, 1, []call{transport.Script(lua.Renew, []string{l.key}, field, l.spec.Lease.Milliseconds())})
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Positive(t, next, "the wait goes on")
	assert.NotEqual(t, field, a.Owner, "as a new owner")
	assert.Nil(t, a.HoldCtx)
	assert.Eventually(t, func() bool { return e.count(t, l, field) == 0 }, 2*time.Second, 10*time.Millisecond, "given back")
	a.Finish(errs.NotAcquired)
}

// UndoNow with a hold releases the hold's lock, which its caller holds,
// only once the undo has answered, also when the caller's context ends
// first: no later script through the hold can overtake the undo.
func TestUndoNowReleasesTheHoldsLockAfterTheUndo(t *testing.T) {
	e := newEnv(t)
	l := newLock("lock", 3*time.Second)
	hctx := e.take(t, l, bg)
	h := Held(hctx, l.spec.Ref)
	require.NoError(t, h.Mu.LockCtx(bg))

	// A Redis busy for 300ms with a script of its own: the undo waits
	// behind it.
	busy := make(chan error, 1)
	go func() {
		busy <- e.rdb.Eval(bg, "local t = redis.call('TIME') local s = t[1] + t[2]/1e6 repeat local n = redis.call('TIME') until n[1] + n[2]/1e6 > s + 0.3 return 1", nil).Err()
	}()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	err := e.m.UndoNow(ctx, h, l.unlock(h.Field, 1))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller left before the undo answered")

	tctx, tcancel := context.WithTimeout(bg, 10*time.Millisecond)
	assert.Error(t, h.Mu.LockCtx(tctx), "the hold's lock is still held while the undo is on its way")
	tcancel()
	require.NoError(t, <-busy)
	lctx, lcancel := context.WithTimeout(bg, 2*time.Second)
	defer lcancel()
	require.NoError(t, h.Mu.LockCtx(lctx), "released once the undo answered")
	h.Mu.Unlock()
	assert.Equal(t, 0, e.count(t, l, h.Field), "the undo ran")
}

// Background work runs until Close, which waits for it; after Close,
// Go runs nothing.
func TestGoStopsAtClose(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	done := make(chan struct{})
	require.True(t, e.m.Go(func() { <-release; close(done) }))
	closed := make(chan struct{})
	go func() { e.m.Close(time.Now().Add(5 * time.Second)); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close did not wait for the background work")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	<-done
	assert.False(t, e.m.Go(func() { t.Error("ran after Close") }))
}

// A release of a hold that has ended with its context says nil at once
// even while an earlier call through the hold keeps the hold's lock all
// along (the give-back its end started, on a link gone silent): it needs
// nothing from that call, and Redis is given the lock back once that call
// is done.
func TestReleaseOfEndedHoldBusyThroughItsBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := newLock("lock", 3*time.Second)
	parent, cancel := context.WithCancel(bg)
	hctx := e.take(t, l, parent)
	h := Held(hctx, l.spec.Ref)
	require.NoError(t, h.Mu.LockCtx(bg)) // an earlier call, still on its way
	cancel()
	<-hctx.Done()

	start := time.Now()
	err := e.release(hctx, l)
	took := time.Since(start)
	assert.NoError(t, err, "the hold ended with its context: nil, not busy")
	assert.Less(t, took, time.Second, "at once: the hold's context has ended, and so has the release's bound")

	h.Mu.Unlock()
	assert.Eventually(t, func() bool {
		n, err := e.rdb.Exists(bg, l.key).Result()
		return err == nil && n == 0
	}, 2*time.Second, 10*time.Millisecond, "given back once the earlier call is done")
}

// Took reads lua/lock.lua's one-integer replies (Spec.Counts) as the
// tables every caller reads: a grant's count, another owner's lease, a
// re-entry whose hold is gone.
func TestTookCounts(t *testing.T) {
	e := newEnv(t)
	l := newLock("took", 30*time.Second)
	do := func(field string, count int) []int64 {
		t.Helper()
		v, err := Took(e.m.tr.Do(bg, l.acquire(field, count), nil), true, nil)
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, []int64{1, 1}, do("a", 0), "a first hold")
	assert.Equal(t, []int64{1, 2}, do("a", 1), "a re-entry")
	v := do("b", 0)
	require.Len(t, v, 2)
	assert.Equal(t, int64(0), v[0], "held by another owner")
	assert.InDelta(t, 30000, v[1], 1000, "with its lease left, in ms")
	assert.Equal(t, []int64{-1, 0}, do("b", 1), "a re-entry whose hold is gone")
	require.NoError(t, e.rdb.Persist(bg, "took").Err())
	assert.Equal(t, []int64{0, -1}, do("b", 0), "held with no lease")

	_, err := Took(e.m.tr.Do(bg, l.acquire("a", 0), nil), false, nil)
	require.Error(t, err, "one integer is not a table")
}
