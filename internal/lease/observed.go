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

// observed is a hold's part in that order.
type observed struct {
	vals    atomic.Pointer[context.Context] // the observer's values for the hold's contexts
	mu      sync.Mutex
	started bool                    // Started has been called
	later   []func(context.Context) // end reports waiting for Started
}

// Started records that the observer was told of h's start and gave vals
// (nil: none), whose values h's contexts carry from now on instead of
// h.Parent's (its cancellation stays h.Parent's); it runs the end reports
// that waited for it. It is called once per hold that Keeper.Add started.
func (h *Hold) Started(vals context.Context) {
	if vals != nil {
		h.obs.vals.Store(&vals)
	}
	h.obs.mu.Lock()
	h.obs.started = true
	later := h.obs.later
	h.obs.later = nil
	h.obs.mu.Unlock()
	for _, f := range later {
		f(h.Values())
	}
}

// AfterStarted runs report with h's values (see Values) once the observer
// has been told of h's start: at once if it has.
func (h *Hold) AfterStarted(report func(context.Context)) {
	h.obs.mu.Lock()
	if !h.obs.started {
		h.obs.later = append(h.obs.later, report)
		h.obs.mu.Unlock()
		return
	}
	h.obs.mu.Unlock()
	report(h.Values())
}

// Values returns the context whose values h's contexts carry: the one the
// observer gave at its start, or h.Parent.
func (h *Hold) Values() context.Context {
	if v := h.obs.vals.Load(); v != nil {
		return *v
	}
	return h.Parent
}

// valuesCtx is the base of a hold's contexts: h.Parent's cancellation and
// deadline, with h's values (Values). The hold's own context is a
// cancelCtx made on it in Add, which answers the context package's
// lookups of its cancellation itself.
type valuesCtx struct {
	context.Context // h.Parent
	h               *Hold
}

func (c *valuesCtx) Value(key any) any {
	if v := c.h.obs.vals.Load(); v != nil {
		return (*v).Value(key)
	}
	return c.Context.Value(key)
}

func (c *valuesCtx) String() string { return fmt.Sprint(c.Context) }
