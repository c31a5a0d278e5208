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

// slot is one of the keeper's bounds: its channel closes at its end, and
// so do the calls' own channels that wait for it (calls).
type slot struct {
	n     int64 // its end, in slotWidths of the monotonic clock since monoBase
	ch    chan struct{}
	calls []callOf
}

// callOf is a call of a hold (its call context, and which of its calls:
// the context is the hold's, made again by each).
type callOf struct {
	c   *callCtx
	gen uint64
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
	return w.after(d, callOf{})
}

// after is After, which also ends call (its own channel) when the bound
// has passed, if call.c is set.
func (w *Keeper) after(d time.Duration, call callOf) (<-chan struct{}, time.Time) {
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
		if call.c != nil {
			s.open[i-1].calls = append(s.open[i-1].calls, call)
		}
		return s.open[i-1].ch, until
	}
	ch := make(chan struct{})
	s.open = append(s.open, slot{})
	copy(s.open[i+1:], s.open[i:])
	s.open[i] = slot{n: n, ch: ch}
	if call.c != nil {
		s.open[i].calls = append(s.open[i].calls, call)
	}
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
		for _, call := range s.open[k].calls {
			call.c.end(callBound, call.gen)
		}
		k++
	}
	s.open = append(s.open[:0], s.open[k:]...)
	s.at = 0
	if len(s.open) > 0 {
		s.at = s.open[0].n
		s.timer.Reset(time.Until(monoBase.Add(time.Duration(s.at) * slotWidth)))
	}
}

// callCtx is the context of a call through a hold (a release), made under
// the hold's lock (Hold.CallCtx): the caller's values, ended by a bound on
// the keeper's clock (After) and, for a hold whose parent can end, while
// watched, by the parent's end. It is part of the hold: no allocation,
// but the call's own channel when the parent can end (the keeper's
// watch of the parent, and its slot, close it).
type callCtx struct {
	vals  context.Context
	done  <-chan struct{} // the slot's (the parent never ends), or own
	until time.Time

	mu      sync.Mutex
	own     chan struct{} // this call's Done, when the parent can end
	ended   uint8         // why own is closed: 0 (not), callBound, callParent
	watched bool          // the parent's end ends the call (see Hold.WatchParent)
	gen     uint64        // this call's number: a late end of an earlier one is ignored
}

// Why a call's own channel closed.
const (
	callBound  = 1 + iota // its bound passed
	callParent            // the hold's parent ended, while watched
)

func (c *callCtx) Deadline() (time.Time, bool) { return c.until, true }
func (c *callCtx) Done() <-chan struct{}       { return c.done }

func (c *callCtx) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended == callParent {
		return context.Canceled
	}
	return context.DeadlineExceeded
}

// end closes call gen's own channel, for why (unless the parent's end is
// not watched), once.
func (c *callCtx) end(why uint8, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own == nil || c.gen != gen || c.ended != 0 || why == callParent && !c.watched {
		return
	}
	c.ended = why
	close(c.own)
}

// parentEnded ends the call under way, if it watches the parent.
func (c *callCtx) parentEnded() {
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	c.end(callParent, gen)
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
// ended d from now and, when h's parent can end, by its end (watched: see
// WatchParent), for a caller that holds h.Mu, as the only call through h
// that uses it until its reply has come (the context is h's own, made
// again by the next call).
func (h *Hold) CallCtx(ctx context.Context, d time.Duration) context.Context {
	c := &h.call
	c.vals = ctx
	if !h.gate.ends {
		c.done, c.until = h.k.After(d)
		return c
	}
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.own, c.ended, c.watched = make(chan struct{}), 0, true
	c.done = c.own
	c.mu.Unlock()
	_, c.until = h.k.after(d, callOf{c, gen})
	if h.Parent.Err() != nil {
		c.end(callParent, gen)
	}
	return c
}

// Unwatch has the parent's end no longer end h's call under way (see
// CallCtx): a context that the hold's own end ends (a downgrade's) does
// not end its release.
func (h *Hold) Unwatch() {
	h.call.mu.Lock()
	h.call.watched = false
	h.call.mu.Unlock()
}

// WatchParent has the end of h's parent end h's call under way again
// (after Unwatch), now that h has ended (the keeper no longer watches the
// parent for it): it returns what stops it.
func (h *Hold) WatchParent() (stop func() bool) {
	c := &h.call
	c.mu.Lock()
	c.watched = true
	c.mu.Unlock()
	return context.AfterFunc(h.Parent, c.parentEnded)
}

// CallParentEnded reports whether h's call under way ended with the
// parent's end.
func (h *Hold) CallParentEnded() bool {
	h.call.mu.Lock()
	defer h.call.mu.Unlock()
	return h.call.ended == callParent
}
