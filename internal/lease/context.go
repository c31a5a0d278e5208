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
// method can read it (an atomic load and a clock read), and the hold's contexts (holdCtx: the hold's own, and every
// re-entry's) look at it in Err, Done and Value: the first of them to find
// it passed ends the hold as lost, synchronously, which cancels the real
// context with cause ErrLeaseLost before that method returns. Contexts the
// user derives from them are cancelled by that, as soon as it happens.

// Overdue ends h as lost if its local deadline has passed and it is still
// live, as its timer would (the timer may not have run yet: the process
// was stopped), and reports whether its deadline had passed. When it
// returns true, every context of the hold is cancelled: if another
// goroutine is ending the hold this instant, it waits for that (so the
// hold's firsts must not call the methods of its contexts: see
// hold.first). The give-back to Redis runs in the background: the caller
// may hold h.mu.
func (h *Hold) Overdue() bool {
	if !h.dl.passed() {
		return false
	}
	k := h.k
	if k.End(h, EndLost, k.cfg.Errors.Lost) {
		go k.cfg.GiveBack(h)
	} else {
		<-h.over // ended by another goroutine, which is cancelling its contexts
	}
	return true
}

// holdCtx is a context of a hold: the hold's own, or a re-entry's. Its
// Err, Done and Value first end the hold if its local deadline has passed
// (see overdue), so what they report is true from that moment on.
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
	c.h.Overdue()
	return c.Context.Err()
}

func (c *holdCtx) Done() <-chan struct{} {
	c.h.Overdue()
	return c.Context.Done()
}

// Value also serves context.Cause, which reads the cancellation's cause
// through it. It answers holdsKey with itself (a hold's context carries
// its hold: see HoldIn).
func (c *holdCtx) Value(key any) any {
	c.h.Overdue()
	if _, ok := key.(holdsKey); ok {
		return c
	}
	return c.Context.Value(key)
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
		c, ok := ctx.(*holdCtx)
		if !ok {
			if c, _ = ctx.Value(holdsKey{}).(*holdCtx); c == nil {
				return nil
			}
		}
		c.h.Overdue()
		if c.h.Ref == ref {
			return c.h
		}
		ctx = c.Context
	}
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
