package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// holdIn is hold for a fixed lease d taken with parent, whose timer is
// held back: it never fires, as on a process stopped past the deadline
// whose other timers run first on resuming.
func (e *env) holdIn(t *testing.T, parent context.Context, key string, d time.Duration) *Hold {
	t.Helper()
	st := Stamp{Sent: time.Now(), Epoch: e.k.Epoch(Ref{Owner: e, Kind: "test", Name: key}, nil)}
	require.NoError(t, e.rdb.HSet(bg, key, "owner", 1).Err())
	require.NoError(t, e.rdb.PExpire(bg, key, d).Err())
	h := &Hold{Ref: Ref{Owner: e, Kind: "test", Name: key}, Field: "owner", Lease: d,
		Parent: parent, Count: 1, Taken: time.Now()}
	h.One = [2]transport.Call{
		{Script: lua.Renew, Keys: []string{key}, Args: []any{"owner", d.Milliseconds()}},
		{Script: lua.Drop, Keys: []string{key}, Args: []any{"owner", transport.Publish, "0", key + ":ch"}},
	}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	require.NoError(t, e.k.Add(h, st))
	e.k.unwatch(h) // its deadline's timer held back
	return h
}

// Issue 42, break 5: the context a hold was taken with ends after the
// hold's deadline, and its end is the first thing the process runs (the
// hold's timer is late: a process stopped past both, whose context's
// timer ran first on resuming, as it did in half the resumes from a real
// SIGSTOP and in all of them with GOMAXPROCS=1). The lease ran out first:
// the hold ends lost, and every context of it says so, one derived from
// it too, without anyone reading them first. On main the context's end
// reached the hold's context (cause context.DeadlineExceeded) and the
// hold was never ended here.
func TestContextEndAfterALapseIsALoss(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	parent, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	h := e.holdIn(t, parent, "l:lapse-first", 200*time.Millisecond) // its deadline: 179ms
	derived, stop := context.WithCancel(h.Ctx)
	defer stop()
	select {
	case <-derived.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context's end never reached the hold's")
	}
	assert.ErrorIs(t, context.Cause(derived), errLost, "the context's end was told, though the lease ran out first")
	assert.ErrorIs(t, context.Cause(h.Ctx), errLost)
	// The owner is told once the contexts are cancelled.
	eventually(t, time.Second, "the owner told", func() bool { _, ok := e.endOf(h); return ok })
	why, _ := e.endOf(h)
	assert.Equal(t, EndLost, why)
}

// The other order, the hold's timer held back as well: the context's
// deadline came before the hold's. The hold ends with its context, whose
// error and cause its contexts keep (context.DeadlineExceeded), and the
// owner is told so.
func TestContextEndBeforeALapseIsTheContexts(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	parent, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	h := e.holdIn(t, parent, "l:context-first", 200*time.Millisecond)
	derived, stop := context.WithCancel(h.Ctx)
	defer stop()
	<-parent.Done()
	time.Sleep(150 * time.Millisecond) // past the hold's deadline too
	select {
	case <-derived.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context's end never reached the hold's")
	}
	assert.ErrorIs(t, derived.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, h.Ctx.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, context.Cause(h.Ctx), context.DeadlineExceeded)
	eventually(t, time.Second, "the owner told", func() bool { _, ok := e.endOf(h); return ok })
	why, _ := e.endOf(h)
	assert.Equal(t, EndParent, why)
}

// A hold's end marks its context ended, then cancels its real context: a
// reader on another goroutine in between (a stopped process resumed, the
// end preempted there) finds Done closed and the end's cause, not an open
// Done and a cause of context.Canceled (TestPausedHolderIsToldAtOnce saw
// that once, for a Semaphore's hold).
func TestEndSeenBetweenItsStateAndItsCancel(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	h := e.holdIn(t, bg, "l:end-window", 30*time.Second)
	_ = h.Ctx.Done() // the real context exists, as once anything derived from it
	// What cancelOwn does before it cancels the real context.
	h.tmu.Lock()
	h.endCause, h.endByParent = errLost, false
	h.cstate.Store(ctxCanceled)
	h.tmu.Unlock()
	require.ErrorIs(t, h.Ctx.Err(), context.Canceled)
	select {
	case <-h.Ctx.Done():
	default:
		t.Fatal("Err says ended, Done is open")
	}
	assert.ErrorIs(t, context.Cause(h.Ctx), errLost)
}
