package lease

import (
	"context"
	"sync"
	"time"
)

// The keeper's clock for the bounds of calls (a release's ReleaseTimeout):
// a channel closed when a bound has passed, shared by every call whose
// bound ends in the same slot of slotWidth, with one timer for the
// earliest slot. A bound costs a call an allocation only when it opens a
// slot (one per slotWidth at most, whatever the calls' rate), where a
// timer of its own would cost it three (context.WithTimeout's).
//
// A bound ends up to slotWidth after it was asked for: a release's five
// seconds are 5s to 5.01s.

// slotWidth is the resolution of the keeper's bounds.
const slotWidth = 10 * time.Millisecond

// slot is one of the keeper's bounds: its channel closes at its end.
type slot struct {
	n  int64 // its end, in slotWidths of the monotonic clock since monoBase
	ch chan struct{}
}

// slots are the bounds asked for that have not passed yet, earliest first.
type slots struct {
	mu    sync.Mutex
	open  []slot
	timer *time.Timer // set for open[0]
	at    int64       // the slot the timer is set for; 0: none
}

// After returns a channel closed once d has passed (at most slotWidth
// later), and when that is.
func (w *Keeper) After(d time.Duration) (<-chan struct{}, time.Time) {
	s := &w.slots
	t := time.Now().Add(d)
	n := (int64(t.Sub(monoBase)) + int64(slotWidth) - 1) / int64(slotWidth)
	until := monoBase.Add(time.Duration(n) * slotWidth)
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.open)
	for i > 0 && s.open[i-1].n > n { // most often the last, or after it
		i--
	}
	if i > 0 && s.open[i-1].n == n {
		return s.open[i-1].ch, until
	}
	ch := make(chan struct{})
	s.open = append(s.open, slot{})
	copy(s.open[i+1:], s.open[i:])
	s.open[i] = slot{n: n, ch: ch}
	if s.at == 0 || n < s.at {
		s.at = n
		s.timer.Reset(time.Until(until))
	}
	return ch, until
}

// fire closes the slots that have passed, and sets the timer for the next.
func (s *slots) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := int64(time.Since(monoBase)) / int64(slotWidth)
	k := 0
	for k < len(s.open) && s.open[k].n <= now {
		close(s.open[k].ch)
		k++
	}
	s.open = append(s.open[:0], s.open[k:]...)
	s.at = 0
	if len(s.open) > 0 {
		s.at = s.open[0].n
		s.timer.Reset(time.Until(monoBase.Add(time.Duration(s.at) * slotWidth)))
	}
}

// callCtx is the context of a call through a hold whose parent never ends
// (a release), made under the hold's lock (Hold.CallCtx): the caller's
// values, ended by a bound on the keeper's clock (After). It is part of
// the hold: no allocation.
type callCtx struct {
	vals  context.Context
	done  <-chan struct{}
	until time.Time
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.until, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Value is the caller's, but for the cause (context.Cause): the bound's
// own, its Err.
func (c *callCtx) Value(key any) any {
	if key == causeKey {
		return nil
	}
	return c.vals.Value(key)
}

// CallCtx returns the context of a call through h made with ctx's values,
// ended d from now: for a hold whose parent never ends, by a caller that
// holds h.Mu, as the only call through h that uses it until its reply has
// come (the context is h's own, made again by the next call).
func (h *Hold) CallCtx(ctx context.Context, d time.Duration) context.Context {
	h.call.vals = ctx
	h.call.done, h.call.until = h.k.After(d)
	return &h.call
}
