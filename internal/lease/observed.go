package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// What the root's Observer is told of a hold, in order: its start (Started,
// once the hold is made, with the values the observer gave it: a trace's
// live span), then its end. A hold can end while its start is being told
// (its lease runs out, a ForceUnlock, Close): the end's report then waits
// for the start's, so an observer never hears of an end before its start.

// Observed is the part of a hold (Hold.Obs) whose observer gives values at
// its start: the values, and the order of the reports. A hold without one
// (nil) carries h.Parent's values, and its end is reported at once.
type Observed struct {
	// vals are the observer's values for the hold's contexts (nil:
	// none), written once, by Started, before started is set and before
	// the hold's context is handed out: its readers come after.
	vals    context.Context
	base    valuesCtx // the base of the hold's contexts
	mu      sync.Mutex
	started bool                    // Started has been called
	told    atomic.Bool             // started, read without mu (StartedValues)
	later   []func(context.Context) // end reports waiting for Started
}

// Observe gives h its Observed (h.Obs), part of h: its observer gives
// values at its start. Called before Keeper.Add.
func (h *Hold) Observe() { h.Obs = &h.obs }

// Started records that the observer was told of h's start and gave vals
// (nil: none), whose values h's contexts carry from now on instead of
// h.Parent's (their cancellation stays h.Parent's); it runs the end
// reports that waited for it (AfterStarted). It is called once, after
// Keeper.Add started h; it does nothing when h.Obs is nil.
func (h *Hold) Started(vals context.Context) {
	o := h.Obs
	if o == nil {
		return
	}
	o.mu.Lock()
	o.vals = vals
	o.started = true
	o.told.Store(true)
	later := o.later
	o.later = nil
	o.mu.Unlock()
	for _, f := range later {
		f(h.Values())
	}
}

// AfterStarted runs report with h's values (see Values) once the observer
// has been told of h's start: at once if it has, or if h.Obs is nil.
func (h *Hold) AfterStarted(report func(context.Context)) {
	if o := h.Obs; o != nil {
		o.mu.Lock()
		if !o.started {
			o.later = append(o.later, report)
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
	}
	report(h.Values())
}

// StartedValues returns h's values (see Values) and true once the
// observer has been told of h's start (or h has no Observed): an end
// report can be made at once, without waiting (AfterStarted).
func (h *Hold) StartedValues() (context.Context, bool) {
	if o := h.Obs; o != nil && !o.told.Load() {
		return nil, false
	}
	return h.Values(), true
}

// Values returns the context whose values h's contexts carry: the one the
// observer gave at its start, or h.Parent.
func (h *Hold) Values() context.Context {
	if o := h.Obs; o != nil && o.vals != nil {
		return o.vals
	}
	return h.Parent
}

// valuesCtx is the base of an observed hold's contexts: h.Parent's
// cancellation and deadline, with h's values (Values). The hold's own
// context is a cancelCtx made on it in Add, which answers the context
// package's lookups of its cancellation itself.
type valuesCtx struct {
	context.Context // h.Parent
	h               *Hold
}

func (c *valuesCtx) Value(key any) any {
	if v := c.h.Obs.vals; v != nil {
		return v.Value(key)
	}
	return c.Context.Value(key)
}

func (c *valuesCtx) String() string { return fmt.Sprint(c.Context) }
