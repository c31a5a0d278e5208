package lease

import (
	"context"
	"fmt"
)

// The hold's context tells the truth from the moment its local deadline
// has passed, not from the moment a timer runs: a process stopped past its
// lease (SIGSTOP, a VM paused, a long GC) resumes with every timer late,
// and its code may run before any of them; a machine resumed from a
// suspend, whose monotonic clock did not count it, has timers later still
// (see clock.go). So each hold keeps its local deadline where a context
// method can read it (an atomic load and a clock read), and the hold's
// contexts (holdCtx: the hold's own, and every re-entry's) look at it in
// Err, Done and Value, and at the end of the context the hold was taken
// with: the first of them to find either due ends the hold, synchronously,
// with the end that came first (Settle, parent.go), which cancels the real
// context (with cause ErrLeaseLost for the lease's) before that method
// returns. Contexts the user derives from them are cancelled by that, as
// soon as it happens.

// holdCtx is a context of a hold: the hold's own, or a re-entry's. Its
// Err, Done and Value first end the hold if it is due to end (see
// Settle), so what they report is true from that moment on.
type holdCtx struct {
	context.Context
	h *Hold
}

func (c *holdCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	// Read again whatever Settle says: the hold may have ended since the
	// read above (its end cancels the context, then clears the deadline
	// that Settle looks at).
	c.h.Settle()
	return c.Context.Err()
}

func (c *holdCtx) Done() <-chan struct{} {
	c.h.Settle()
	return c.Context.Done()
}

// Value also serves context.Cause, which reads the cancellation's cause
// through it. It answers the hold's Ref with the hold itself (a hold's
// context carries its hold: see HoldIn).
func (c *holdCtx) Value(key any) any {
	c.h.Settle()
	if r, ok := key.(Ref); ok && r == c.h.Ref {
		return c.h
	}
	return c.Context.Value(key)
}

// HoldIn returns the hold of ref that ctx carries, or nil: ctx's value
// for ref. A hold's own context (and a re-entry's) answers at once,
// without boxing ref, as Unlock's lookup of its hold does every time.
func HoldIn(ctx context.Context, ref Ref) *Hold {
	if c, ok := ctx.(*holdCtx); ok {
		c.h.Settle()
		if c.h.Ref == ref {
			return c.h
		}
		ctx = c.Context
	}
	h, _ := ctx.Value(ref).(*Hold)
	return h
}

func (c *holdCtx) String() string {
	return fmt.Sprintf("%v.WithHold(%s %q)", c.Context, c.h.Ref.Kind, c.h.Ref.Name)
}

// Tie cancels cancel, with the hold's cause, when h ends, synchronously
// (at once if it has ended); untie undoes it.
func (h *Hold) Tie(cancel context.CancelCauseFunc) (untie func()) {
	h.tmu.Lock()
	if h.why != NotEnded {
		h.tmu.Unlock()
		cancel(context.Cause(h.Ctx))
		return func() {}
	}
	if h.ties == nil {
		h.ties = map[uint64]context.CancelCauseFunc{}
	}
	h.nties++
	id := h.nties
	h.ties[id] = cancel
	h.tmu.Unlock()
	return func() {
		h.tmu.Lock()
		delete(h.ties, id)
		h.tmu.Unlock()
	}
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
