package redisync

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// The hold's context tells the truth from the moment its local deadline
// has passed, not from the moment a timer runs: a process stopped past its
// lease (SIGSTOP, a VM paused, a long GC) resumes with every timer late,
// and its code may run before any of them. So each hold keeps its local
// deadline where a context method can read it (two atomic loads and a
// clock read), and the hold's contexts (holdCtx: the hold's own, and every
// re-entry's) look at it in Err, Done and Value: the first of them to find
// it passed ends the hold as lost, synchronously, which cancels the real
// context with cause ErrLeaseLost before that method returns. Contexts the
// user derives from them are cancelled by that, as soon as it happens.

// monoBase is the origin of the holds' deadlines (monotonic clock).
var monoBase = time.Now()

// noDeadline is the stored deadline of a hold that has none to watch: not
// yet registered, or ended.
const noDeadline = math.MaxInt64

// monoOf is t as stored in a hold's deadline.
func monoOf(t time.Time) int64 { return int64(t.Sub(monoBase)) }

// dlStore is a hold's local deadline (see deadline), readable without its
// lock.
type dlStore struct{ at atomic.Int64 }

func (d *dlStore) set(t time.Time) { d.at.Store(monoOf(t)) }
func (d *dlStore) clear()          { d.at.Store(noDeadline) }

// passed reports whether the deadline has passed.
func (d *dlStore) passed() bool {
	at := d.at.Load()
	return at != noDeadline && int64(time.Since(monoBase)) >= at
}

// overdue ends h as lost if its local deadline has passed and it is still
// live, as its timer would (the timer may not have run yet: the process
// was stopped), and reports whether its deadline had passed. When it
// returns true, every context of the hold is cancelled: if another
// goroutine is ending the hold this instant, it waits for that (so the
// hold's firsts must not call the methods of its contexts: see
// hold.first). The give-back to Redis runs in the background: the caller
// may hold h.mu.
func (h *hold) overdue() bool {
	if !h.dl.passed() {
		return false
	}
	c := h.ref.c
	if c.wd.end(h, endLost, ErrLeaseLost) {
		go c.giveBack(h)
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
	h *hold
}

func (c *holdCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	// Read again whatever overdue says: the hold may have ended since the
	// read above (its end cancels the context, then clears the deadline
	// that overdue looks at).
	c.h.overdue()
	return c.Context.Err()
}

func (c *holdCtx) Done() <-chan struct{} {
	c.h.overdue()
	return c.Context.Done()
}

// Value also serves context.Cause, which reads the cancellation's cause
// through it.
func (c *holdCtx) Value(key any) any {
	c.h.overdue()
	return c.Context.Value(key)
}

func (c *holdCtx) String() string {
	return fmt.Sprintf("%v.WithHold(%s %q)", c.Context, c.h.ref.kind, c.h.ref.name)
}

// tie cancels cancel, with the hold's cause, when h ends, synchronously
// (at once if it has ended); untie undoes it.
func (h *hold) tie(cancel context.CancelCauseFunc) (untie func()) {
	h.tmu.Lock()
	if h.why != live {
		h.tmu.Unlock()
		cancel(context.Cause(h.ctx))
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

// contextFor returns the context a re-entry with ctx hands out: ctx itself
// when it ends with the hold (it is the hold's context, or carries values
// on top of it), else a child of ctx that also ends when the hold does,
// and like the hold's own context tells from its deadline.
func (h *hold) contextFor(ctx context.Context) context.Context {
	if ctx.Done() == h.ctx.Done() {
		return ctx
	}
	cctx, cancel := context.WithCancelCause(ctx)
	untie := h.tie(cancel)
	context.AfterFunc(cctx, untie)
	return &holdCtx{Context: cctx, h: h}
}
