package lease

import (
	"context"
	"fmt"
	"time"
)

// The hold's context tells the truth from the moment its local deadline
// has passed, not from the moment a timer runs: a process stopped past its
// lease (SIGSTOP, a VM paused, a long GC) resumes with every timer late,
// and its code may run before any of them; a machine resumed from a
// suspend, whose monotonic clock did not count it, has timers later still
// (see clock.go). So each hold keeps its local deadline where a context
// method can read it (an atomic load and a clock read), and the hold's
// contexts (its own, ownCtx, and every re-entry's, holdCtx) look at it in
// Err, Done and Value, and at the end of the context the hold was taken
// with: the first of them to find either due ends the hold,
// synchronously, with the end that came first (Settle, parent.go), which
// cancels the context (with cause ErrLeaseLost for the lease's) before
// that method returns. Contexts the user derives from them are cancelled
// by that, as soon as it happens.
//
// The hold's own context is part of the hold (no allocation): it answers
// Err, Deadline and Value itself, and ends with the hold, which ends with
// the context it was taken with (the parent) unless its lease ran out
// first: in the background when the parent ends (the Keeper watches it),
// and at once when a method of the hold's context finds it ended first.
// Its cause is the hold's (context.Cause reads it through Value, under
// the context package's own key: see causeKey). Only once it is asked for
// its Done, or a context is derived from it, is a real context made
// beside it (Hold.cc, on the hold's gate: parent.go), whose Done is its
// Done: the contexts derived from the hold's then end with it
// synchronously, without a goroutine, as children of a context.WithCancel
// would, with the parent's error and cause when the parent's end came
// first, else context.Canceled and the hold's cause.

// check ends h if it is due to end (Settle), or, once its own context has
// been cancelled, finishes that cancellation (finishCancel): what a method
// of its contexts reports is true from then on.
func (h *Hold) check() {
	if h.cstate.Load() == ctxLive {
		h.Settle()
		return
	}
	h.finishCancel()
}

// The states of a hold's own context (Hold.cstate).
const (
	ctxLive     = iota
	ctxCanceled // Err is context.Canceled
	ctxDeadline // the parent's deadline passed: Err is context.DeadlineExceeded
)

// ownCtx is a hold's own context (Hold.Ctx), part of the hold.
type ownCtx struct{ h *Hold }

func (c *ownCtx) Deadline() (time.Time, bool) { return c.h.Parent.Deadline() }

func (c *ownCtx) Done() <-chan struct{} {
	h := c.h
	h.check()
	if cc := h.realCtx(); cc != nil {
		return cc.Done()
	}
	return closedChan
}

func (c *ownCtx) Err() error {
	h := c.h
	if err := h.ctxErr(); err != nil {
		return err
	}
	h.check()
	return h.ctxErr()
}

// Value also serves context.Cause, which reads the cancellation's cause
// through it (causeKey). It answers holdsKey with itself (a hold's context
// carries its hold: see HoldIn, which looks at the hold's end itself); any
// other key with the parent's value, or the observer's (see Values), which
// the hold's end does not change: it does not look at the hold (a hook
// reading a command's values costs no clock read).
func (c *ownCtx) Value(key any) any {
	h := c.h
	switch key.(type) {
	case holdsKey:
		return c
	case *int:
		if key == causeKey {
			h.check()
			// The context package asks for it to derive a context (live:
			// the real one, its parent), and context.Cause (ended).
			if cc := h.realCtx(); cc != nil {
				return cc.Value(key)
			}
			return h.causeCC
		}
	}
	return h.valuesBase().Value(key)
}

// AfterFunc runs f once the context is cancelled (at once, in a goroutine
// of its own, once it has been). The context package asks for it to have
// a context derived from this one end with it, when that context's Value
// did not lead it to the real context beside it (Value's causeKey: should
// a Go release stop asking for that key, the derived contexts still end
// with the hold's, without a goroutine watching each).
func (c *ownCtx) AfterFunc(f func()) (stop func() bool) {
	h := c.h
	if stop, ok := h.tie(func(error) { f() }); ok {
		return stop
	}
	go func() {
		h.ending.Wait()
		f()
	}()
	return func() bool { return false }
}

func (c *ownCtx) String() string {
	return fmt.Sprintf("%v.WithHold(%s %q)", c.h.Parent, c.h.Ref.Kind, c.h.Ref.Name)
}

// ctxErr is the error of h's own context: nil while it lives.
func (h *Hold) ctxErr() error {
	switch h.cstate.Load() {
	case ctxCanceled:
		return context.Canceled
	case ctxDeadline:
		return context.DeadlineExceeded
	}
	return nil
}

// cancelOwn cancels h's own context, which ends for why with cause (nil:
// none): its Err, its cause, its Done. err is, for an end with h.Parent
// (EndParent), h.Parent's error, which the context ends with, as a child
// of h.Parent would (context.DeadlineExceeded stays what it was).
func (h *Hold) cancelOwn(why EndReason, err, cause error) {
	state := uint32(ctxCanceled)
	parent := why == EndParent && err != nil
	if parent && err == context.DeadlineExceeded {
		state = ctxDeadline
	}
	h.tmu.Lock()
	cancel := h.ccCancel
	if cancel == nil {
		h.causeCC = causeOf(h.k, cause)
	}
	h.endCause, h.endByParent = cause, parent
	h.cstate.Store(state)
	h.tmu.Unlock()
	if cancel == nil {
		return
	}
	// The real context, and the contexts derived from it, at once.
	if parent {
		h.gate.close(err) // with h.Parent's error and cause
	}
	cancel(cause) // a no-op once the gate has
}

// finishCancel makes, for a reader that finds h's context ended, the
// cancellation of its real context that the end (cancelOwn) may still be
// making on another goroutine, so that Done is closed and Cause answers
// once Err does. It does nothing once it was made (a CancelCauseFunc acts
// once); an end with the parent's is left to the gate, which gives the
// parent's error and cause.
func (h *Hold) finishCancel() {
	h.tmu.Lock()
	cancel, cause, byParent := h.ccCancel, h.endCause, h.endByParent
	h.tmu.Unlock()
	if cancel != nil && !byParent {
		cancel(cause)
	}
}

// realCtx returns the real context beside h's own (see above), made now if
// h lives; nil once h has ended without one.
func (h *Hold) realCtx() context.Context {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	if h.cc == nil && h.cstate.Load() == ctxLive && h.k != nil {
		h.cc, h.ccCancel = context.WithCancelCause(&h.gate)
	}
	return h.cc
}

// valuesBase is the context whose values h's own context carries: the
// parent's, or the observer's (Observed).
func (h *Hold) valuesBase() context.Context {
	if h.Obs != nil {
		return &h.Obs.base
	}
	return h.Parent
}

// closedChan is the Done of a hold's context asked for once it has ended.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// causeKey is the key under which context.Cause asks a context for the
// *cancelCtx that knows its cause (unexported by the context package):
// learned once, from Cause itself, by asking a context that records the
// keys it is asked for. A hold's context answers it, once it has ended,
// with a cancelCtx cancelled with its cause (causeOf). Should Cause ever
// stop asking (nil), a hold's cause reads as its Err, context.Canceled:
// the lease package's tests say so.
var causeKey = func() any {
	s := &keySpy{Context: context.Background()}
	_ = context.Cause(s)
	return s.key
}()

// keySpy records the key of the last Value it was asked for; its Err is
// never nil, so that context.Cause asks.
type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Err() error      { return context.Canceled }
func (s *keySpy) Value(k any) any { s.key = k; return nil }

// causeOf returns what a hold's context answers causeKey with once it has
// ended with cause: a cancelCtx cancelled with it, made once for each of
// the keeper's own errors (k.causes), else when asked.
func causeOf(k *Keeper, cause error) any {
	if k != nil {
		for _, c := range k.causes {
			if c.err == cause {
				return c.cc
			}
		}
	}
	return newCause(cause)
}

// newCause returns a cancelCtx cancelled with cause, as causeKey's value
// (the *cancelCtx itself).
func newCause(cause error) any {
	cc, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return cc.Value(causeKey)
}

// cause is one of the keeper's causes, made once (see causeOf).
type cause struct {
	err error
	cc  any
}

// holdCtx is the context of a re-entry: a context of the re-entry's
// caller that also ends with the hold. Its Err, Done and Value first end
// the hold if its local deadline has passed (see Settle), so what they
// report is true from that moment on.
type holdCtx struct {
	context.Context
	h *Hold
}

func (c *holdCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	// Read again whatever overdue says: the hold may have ended since the
	// read above (its end cancels the context, then clears the deadline
	// that overdue looks at).
	c.h.Settle()
	return c.Context.Err()
}

func (c *holdCtx) Done() <-chan struct{} {
	c.h.Settle()
	return c.Context.Done()
}

// Value answers holdsKey with itself (see HoldIn).
func (c *holdCtx) Value(key any) any {
	c.h.Settle()
	if _, ok := key.(holdsKey); ok {
		return c
	}
	return c.Context.Value(key)
}

func (c *holdCtx) String() string {
	return fmt.Sprintf("%v.WithHold(%s %q)", c.Context, c.h.Ref.Kind, c.h.Ref.Name)
}

// holdsKey is the key under which a context carries holds: each hold's
// context answers it with itself, the nearest first (HoldIn goes on below
// it). One key for every hold, boxed without an allocation, where a key
// naming the lock (its Ref) would be boxed by every lookup.
type holdsKey struct{}

// HoldIn returns the hold of ref that ctx carries, or nil: the nearest of
// the holds' contexts ctx's values lead to whose hold is of ref.
func HoldIn(ctx context.Context, ref Ref) *Hold {
	for {
		var h *Hold
		var below context.Context
		switch c := ctx.(type) {
		case *ownCtx:
			h, below = c.h, c.h.valuesBase()
		case *holdCtx:
			h, below = c.h, c.Context
		default:
			switch c := ctx.Value(holdsKey{}).(type) {
			case *ownCtx:
				h, below = c.h, c.h.valuesBase()
			case *holdCtx:
				h, below = c.h, c.Context
			default:
				return nil
			}
		}
		h.Settle()
		if h.Ref == ref {
			return h
		}
		ctx = below
	}
}

// Tie cancels cancel, with the hold's cause, when h ends, synchronously
// (at once if it has ended); untie undoes it.
func (h *Hold) Tie(cancel context.CancelCauseFunc) (untie func()) {
	stop, ok := h.tie(func(cause error) { cancel(cause) })
	if !ok {
		cancel(context.Cause(h.Ctx))
		return func() {}
	}
	return func() { stop() }
}

// tie has f called with the hold's cause when h ends, after its own
// context is cancelled (see Keeper.end), and returns what undoes it; ok
// is false when h has ended already (f is not kept).
func (h *Hold) tie(f func(cause error)) (stop func() bool, ok bool) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	if h.why != NotEnded {
		return nil, false
	}
	if h.ties == nil {
		h.ties = map[uint64]func(error){}
	}
	h.nties++
	id := h.nties
	h.ties[id] = f
	return func() bool {
		h.tmu.Lock()
		defer h.tmu.Unlock()
		_, kept := h.ties[id]
		delete(h.ties, id)
		return kept
	}, true
}

// ContextFor returns the context a re-entry with ctx hands out: ctx itself
// when it ends with the hold (it is the hold's context, or carries values
// on top of it), else a child of ctx that also ends when the hold does,
// and like the hold's own context tells from its deadline.
func (h *Hold) ContextFor(ctx context.Context) context.Context {
	if ctx.Done() == h.Ctx.Done() {
		return ctx
	}
	cctx, cancel := context.WithCancelCause(ctx)
	untie := h.Tie(cancel)
	context.AfterFunc(cctx, untie)
	return &holdCtx{Context: cctx, h: h}
}
