package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// lockedHold locks the Mutex name on a new Client of e and returns the
// Client, the hold's context and the hold.
func lockedHold(t *testing.T, e *testEnv, name string) (*Client, context.Context, *Hold) {
	t.Helper()
	c := e.client(t)
	m := c.Mutex(name)
	lctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	h := held(lctx, m.spec.ref)
	require.NotNil(t, h)
	return c, lctx, h
}

// loseNow ends h as lost, as its timer does, and gives it back.
func loseNow(c *Client, h *Hold) {
	if c.wd.End(h, EndLost, ErrLeaseLost) {
		c.giveBack(h)
	}
}

// A hold context's Err never says live once it has seen the hold end: a
// hold that ends while Err runs (its end cancels the context, then clears
// the deadline) must not be reported live because its deadline is gone.
// This happened with a downgrade's context on resuming from a stop (1 run
// of TestPausedHolderIsToldAtOnce in about 20).
func TestHoldCtxErrSeesAnEndDuringTheCall(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c, lctx, h := lockedHold(t, e, "holdctx:end")
		inner := h.Ctx.(*holdCtx).Context
		tctx := &holdCtx{Context: &endingCtx{Context: inner, end: func() { loseNow(c, h) }}, h: h}
		assert.Error(t, tctx.Err(), "the hold ended during Err: it is not live")
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
		assert.Error(t, lctx.Err())
	})
}

// A hold whose deadline has passed is not reported live while another
// goroutine is ending it: its timer, on a process that resumed from a
// stop, may be preempted in the middle of the end's firsts (a downgrade's
// check), and the holder's goroutine must not read "live" meanwhile.
func TestHoldCtxErrWhileAnotherGoroutineEndsIt(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c, lctx, h := lockedHold(t, e, "holdctx:firsts")
		inFirst, release := make(chan struct{}), make(chan struct{})
		h.First(func() { close(inFirst); <-release })
		h.dl.set(time.Now().Add(-time.Millisecond)) // as after a stop
		go loseNow(c, h)
		<-inFirst
		got := make(chan error, 1)
		go func() { got <- lctx.Err() }()
		select {
		case err := <-got:
			// It may answer at once, but not "live", and not "ended"
			// with Done still open.
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
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
	})
}

// A write hold lost by its deadline, with a downgrade taken through a
// context derived from it (a value on top): the write hold's end decides
// whether the downgrade's context ended by itself without waiting for
// that end (it would never come), and every context tells the loss.
func TestHoldCtxDowngradeThroughDerivedContextLostByDeadline(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		rw := c.RWMutex("holdctx:down", WithLease(100*time.Millisecond))
		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		type key struct{}
		vctx := context.WithValue(wctx, key{}, 1)
		dctx, err := rw.RLock(vctx)
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond) // past both fixed leases
		done := make(chan struct{})
		go func() {
			defer close(done)
			assert.Error(t, vctx.Err())
			assert.Error(t, wctx.Err())
			assert.Error(t, dctx.Err())
			assert.ErrorIs(t, context.Cause(wctx), ErrLeaseLost)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the contexts' methods hang")
		}
		assert.ErrorIs(t, rw.RUnlock(dctx), ErrLeaseLost)
		assert.ErrorIs(t, rw.Unlock(wctx), ErrLeaseLost)
	})
}
