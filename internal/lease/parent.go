package lease

import (
	"context"
	"sync"
)

// A hold ends with the context it was taken with (h.Parent), or when its
// local deadline passes, whichever came first in time: a process stopped
// past both (SIGSTOP, a long GC, a VM paused or suspended) resumes with
// both due, and the runtime runs their timers (and the goroutine that
// looks first) in an order of its own. So the hold's context is not a
// child of h.Parent that the context package would cancel at once with
// h.Parent's error: it ends when Settle decides which end came first (and
// the real context made beside it, when one is, has for its base a gate,
// which ends only when Settle decides that h.Parent's end came first). Settle compares the two ends on
// the holds' clock (clock.go), which counts a suspend: the lease's local
// deadline, and h.Parent's deadline when it has one and has passed it; a
// cancellation without a deadline counts from when the process sees it
// (now, at the first look after it). A tie goes to the lease.

// Settle ends h if it is due to end: its local deadline has passed, or
// h.Parent has ended or passed its deadline (the context's own timer may
// not have run yet), as the end that came first (see above). It reports
// whether h was due. When it returns true every context of the hold is
// cancelled: if another goroutine is ending the hold this instant, it
// waits for that (so the hold's firsts must not call the methods of its
// contexts: see Hold.First). The give-back to Redis runs in the
// background: the caller may hold h.Mu.
func (h *Hold) Settle() bool {
	at := h.dl.at.Load()
	if at == 0 {
		return false // not registered yet, or ended
	}
	n := now().pos()
	lapsed := n-at >= 0
	perr := h.Parent.Err()
	pdue := h.pdl != 0 && n-h.pdl >= 0
	if !lapsed && perr == nil && !pdue {
		return false
	}
	k := h.k
	if perr != nil || pdue {
		ended := n // a cancellation counts from now, when it is seen
		if pdue {
			ended = h.pdl // it ended by its deadline at the latest
			if perr == nil {
				perr = context.DeadlineExceeded
			}
		}
		if !lapsed || ended < at {
			if k.endParent(h, perr) {
				go k.cfg.GiveBack(h)
			} else {
				h.ending.Wait() // ended by another goroutine, which is cancelling its contexts
			}
			return true
		}
	}
	if k.End(h, EndLost, k.cfg.Errors.Lost) {
		go k.cfg.GiveBack(h)
	} else {
		h.ending.Wait()
	}
	return true
}

// gate is the base of the real context beside a hold's own (context.go):
// the context the hold was taken with for its values and deadline, ended
// only by close (Settle's decision that that context's end came first).
// It is no general context: its one user is the hold's cancelCtx, which
// the context package has follow it through AfterFunc (the gate's values
// lead to another cancelCtx, whose Done is not the gate's), and which
// reads its Done once, when it is made. So close cancels the hold's real
// context, with the gate's error (h.Parent's: context.DeadlineExceeded
// stays what it was) and h.Parent's cause, before it returns. It
// allocates nothing.
type gate struct {
	context.Context // the base: h.Parent, or the observer's values on it
	ends            bool

	mu  sync.Mutex
	err error
	f   func()   // what the hold's cancelCtx registered
	fs  []func() // any other registrations
}

// init makes g the gate of a hold's context on base.
func (g *gate) init(base context.Context) {
	*g = gate{Context: base, ends: base.Done() != nil}
}

// gateOpen and gateClosed are a gate's Done, before and after close.
var gateOpen, gateClosed = make(chan struct{}), make(chan struct{})

func init() { close(gateClosed) }

func (g *gate) Done() <-chan struct{} {
	if !g.ends {
		return nil // never ends: the hold's context does not follow it
	}
	if g.Err() != nil {
		return gateClosed
	}
	return gateOpen
}

func (g *gate) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// AfterFunc calls f when the gate closes, in close's goroutine. Its stop
// does nothing: what stays registered goes with the hold.
func (g *gate) AfterFunc(f func()) (stop func() bool) {
	g.mu.Lock()
	switch {
	case g.err != nil:
		g.mu.Unlock()
		f()
		return noStop
	case g.f == nil:
		g.f = f
	default:
		g.fs = append(g.fs, f)
	}
	g.mu.Unlock()
	return noStop
}

func noStop() bool { return false }

// close ends the gate with err, and with it the hold's context.
func (g *gate) close(err error) {
	g.mu.Lock()
	if g.err != nil || !g.ends {
		g.mu.Unlock()
		return
	}
	g.err = err
	f, fs := g.f, g.fs
	g.f, g.fs = nil, nil
	g.mu.Unlock()
	if f != nil {
		f()
	}
	for _, f := range fs {
		f()
	}
}

// endParent ends h with h.Parent, whose error is err: the hold's own
// context ends with err (through its gate) and h.Parent's cause, or err
// when h.Parent has not been cancelled yet (its deadline passed before its
// timer ran). It reports whether this call ended it.
func (w *Keeper) endParent(h *Hold, err error) bool {
	cause := context.Cause(h.Parent)
	if cause == nil {
		cause = err
	}
	return w.endFor(h, EndParent, err, cause, true)
}
