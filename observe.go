package redisync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// Observer is told what a Client's holds, waits, watchdog and subscription
// do, for metrics and traces: plug in Prometheus, OpenTelemetry (the
// modules extra/redisyncprom and extra/redisyncotel do) or a counter of
// your own. Any field may be nil.
//
// The functions are called synchronously, some on the path of Lock and
// Unlock, so they must be fast and must not block or call back into the
// Client. Those about a hold or a wait get a context: the one given to the
// call that took the hold or tried to (Lock, TryLock, Acquire, Campaign,
// ...), for its values (a trace's span, request attributes), with the
// values the observer added when the wait or the hold started (see
// WaitStarted and HoldStarted). It may have ended; its end may be why the
// hold or the wait ended.
//
// Each first acquisition (not a re-entry, nor a call refused before it
// tried: bad input, a context that had already ended) is told in order:
// WaitStarted; then Acquired and HoldStarted, and at the hold's end
// Released or LeaseLost; or AcquireFailed.
type Observer struct {
	// WaitStarted is called when a first acquisition starts, before its
	// first attempt, with the caller's context. It returns the context
	// the call goes on with (nil: ctx): the Redis commands of the wait
	// carry its values (go-redis's hooks see them: a live span of the
	// wait, to parent them under), and so does the context given to
	// Acquired or AcquireFailed when the wait ends. Only its values are
	// used: the wait still ends with the caller's context, or its bound.
	// Return ctx or a context derived from it, such as one carrying a
	// span.
	WaitStarted func(ctx context.Context, e HoldEvent) context.Context
	// Acquired is called when a hold is taken (not on a re-entry), with
	// how long the call waited for it: the wait's end.
	Acquired func(ctx context.Context, e HoldEvent)
	// HoldStarted is called when a hold is taken, right after Acquired,
	// with the caller's context. It returns the context whose values the
	// hold's context carries (nil: ctx), so that work under the hold can
	// be parented to a live span of the hold; Released or LeaseLost is
	// given it at the hold's end, which is never told before HoldStarted
	// has returned. Only its values are used: the hold still ends as it
	// would. Return ctx or a context derived from it.
	HoldStarted func(ctx context.Context, e HoldEvent) context.Context
	// AcquireFailed is called when a call that would have taken a hold
	// returns without one, with how long it waited (Wait) and the error it
	// returns (Cause): not acquired (TryLock, the bound of TryLockFor),
	// its context ended, the Client closed, Redis failed. It is not called
	// for a re-entry, nor for a call refused before it tried (bad input,
	// a context that had already ended).
	AcquireFailed func(ctx context.Context, e HoldEvent)
	// Released is called when a hold ends without losing its lease: its
	// last release, the end of the context it was taken with, Close. A
	// last release is told once Redis has answered it (before the call
	// returns), so that what is told agrees with what it returns.
	Released func(ctx context.Context, e HoldEvent)
	// LeaseLost is called when a hold ends because its lease was lost, or
	// could no longer be trusted, or was taken by ForceUnlock; and
	// whenever a release (Unlock, RUnlock, Release, Resign, a MultiLock's
	// Unlock) returns ErrLeaseLost because it found the hold gone in
	// Redis (a restart without persistence, a ForceUnlock elsewhere, a
	// deleted key); Cause matches ErrLeaseLost.
	LeaseLost func(ctx context.Context, e HoldEvent)
	// Renewed is called after each round of the watchdog. Rounds of
	// different leases can run at once: it may be called from two
	// goroutines at the same time.
	Renewed func(RenewalEvent)
	// SubscriptionLost is called when a subscription connection (the one
	// that wakes waiters; one per node in sharded mode) is lost: a read or
	// a write on it failed. It is called once per outage, not again for
	// each reconnection that fails meanwhile. Waiters keep their bounds
	// meanwhile, and look again once it is restored.
	SubscriptionLost func(SubscriptionEvent)
	// SubscriptionRestored is called when the first reply is read from a
	// connection after it was lost: go-redis has connected again and
	// subscribed its channels again. A node's connection left with no
	// channel is closed instead, and not restored.
	SubscriptionRestored func(SubscriptionEvent)
	// PubSubModeChanged is called when PubSubAuto's detection settles the
	// pub/sub mode (see PubSubMode): in New when the cluster answers
	// within its bound, or later, when the Client first needs it (until
	// then, unlocks are published classic).
	PubSubModeChanged func(PubSubModeEvent)
}

// Kind is a kind of hold, as HoldEvent.Kind reports it: a short value with
// no spaces, fit for a metric's label.
type Kind string

// The kinds of hold.
const (
	KindMutex     Kind = "mutex"      // a hold of a Mutex
	KindFairMutex Kind = "fair_mutex" // a hold of a FairMutex
	KindRWRead    Kind = "rw_read"    // a read hold of an RWMutex
	KindRWWrite   Kind = "rw_write"   // a write hold of an RWMutex
	KindSemaphore Kind = "semaphore"  // a hold of a Semaphore's permits
	KindMultiLock Kind = "multilock"  // a hold of a MultiLock (its Name: its names, quoted)
	KindElection  Kind = "election"   // a leadership of an Election
)

// Outcome is how a wait or a hold ended, as HoldEvent.Outcome reports it:
// a short value with no spaces, fit for a metric's label.
type Outcome string

// The outcomes: of a wait (Acquired, AcquireFailed), and of a hold
// (Released, LeaseLost).
const (
	OutcomeAcquired         Outcome = "acquired"          // the wait got the lock
	OutcomeNotAcquired      Outcome = "not_acquired"      // TryLock, or TryLockFor's bound (ErrNotAcquired)
	OutcomeCanceled         Outcome = "canceled"          // the call's context was cancelled
	OutcomeDeadlineExceeded Outcome = "deadline_exceeded" // the call's context's deadline passed
	OutcomeClosed           Outcome = "closed"            // the Client was closed (ErrClosed)
	OutcomeError            Outcome = "error"             // Redis failed, or another error
	OutcomeReleased         Outcome = "released"          // a hold ended without losing its lease
	OutcomeLost             Outcome = "lost"              // a hold's lease was lost (ErrLeaseLost)
)

// waitOutcome returns the outcome of a wait that returned err (nil:
// acquired).
func waitOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrNotAcquired):
		return OutcomeNotAcquired
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, ErrClosed):
		return OutcomeClosed
	default:
		return OutcomeError
	}
}

// HoldEvent describes one hold of one lock, or one wait for it.
type HoldEvent struct {
	Kind    Kind          // KindMutex, KindFairMutex, KindRWRead, KindRWWrite, KindSemaphore, KindMultiLock or KindElection
	Name    string        // the lock's name
	Wait    time.Duration // Acquired, HoldStarted: from the call to the grant; AcquireFailed: from the call to its return
	Held    time.Duration // Released, LeaseLost: from the grant to the end
	Cause   error         // LeaseLost: why (matches ErrLeaseLost); AcquireFailed: the call's error
	Outcome Outcome       // Acquired, AcquireFailed (from Cause), Released, LeaseLost; "" for WaitStarted, HoldStarted
	// Handoff is set on Acquired and HoldStarted when a holder in this
	// Client handed the lock straight to this waiter (a Mutex's cohort
	// handoff, see Mutex.Unlock), with no unlock message and no race.
	Handoff bool
}

// RenewalEvent describes one round of the watchdog.
type RenewalEvent struct {
	Holds      int           // leases the round renewed or tried to
	RoundTrips int           // pipelines it sent
	Lost       int           // holds Redis no longer had while they were live (not those released while the round was in flight)
	Failed     int           // renewals that failed otherwise (retried until the deadline)
	Took       time.Duration // how long the round took
}

// SubscriptionEvent describes a subscription connection lost or restored.
type SubscriptionEvent struct {
	Node string        // the node's address in sharded mode; "" for classic mode's one connection
	Err  error         // SubscriptionLost: what failed
	Down time.Duration // SubscriptionRestored: how long it was lost
}

// PubSubModeEvent describes a change of the pub/sub mode.
type PubSubModeEvent struct {
	From PubSubMode // PubSubAuto: the mode was not known yet
	To   PubSubMode // PubSubClassic or PubSubSharded
}

// WithObserver has the Client report its holds, waits, renewals and
// subscription to o (see Observer), from the Client's start. Given several
// times, it adds each: every observer is told, in the order given; of
// WaitStarted and HoldStarted, each is given the context the one before
// returned. A nil o is refused.
func WithObserver(o *Observer) Option {
	return func(c *Client) error {
		if o == nil {
			return fmt.Errorf("%w: nil Observer", ErrInvalid)
		}
		c.obs = Observer{
			WaitStarted:          chain(c.obs.WaitStarted, o.WaitStarted),
			Acquired:             both(c.obs.Acquired, o.Acquired),
			HoldStarted:          chain(c.obs.HoldStarted, o.HoldStarted),
			AcquireFailed:        both(c.obs.AcquireFailed, o.AcquireFailed),
			Released:             both(c.obs.Released, o.Released),
			LeaseLost:            both(c.obs.LeaseLost, o.LeaseLost),
			Renewed:              then(c.obs.Renewed, o.Renewed),
			SubscriptionLost:     then(c.obs.SubscriptionLost, o.SubscriptionLost),
			SubscriptionRestored: then(c.obs.SubscriptionRestored, o.SubscriptionRestored),
			PubSubModeChanged:    then(c.obs.PubSubModeChanged, o.PubSubModeChanged),
		}
		return nil
	}
}

// both returns a function that calls f, then g; either may be nil.
func both[E any](f, g func(context.Context, E)) func(context.Context, E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(ctx context.Context, e E) { f(ctx, e); g(ctx, e) }
}

// chain returns a function that calls f, then g with the context f
// returned (nil: the one f was given), and returns g's (nil: f's); either
// may be nil.
func chain[E any](f, g func(context.Context, E) context.Context) func(context.Context, E) context.Context {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(ctx context.Context, e E) context.Context {
		if c := f(ctx, e); c != nil {
			ctx = c
		}
		if c := g(ctx, e); c != nil {
			ctx = c
		}
		return ctx
	}
}

// then is both for events with no context.
func then[E any](f, g func(E)) func(E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(e E) { f(e); g(e) }
}

// WithLogger has the Client log what goes wrong in the background, as
// warnings: renewals that fail, leases lost, subscription connections lost,
// releases that could not be sent, waits on a semaphore whose permits were
// never set. Nothing is logged on the path of a successful Lock or Unlock.
// The default logs nothing. A nil l is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) error {
		if l == nil {
			return fmt.Errorf("%w: nil Logger", ErrInvalid)
		}
		c.log = l
		return nil
	}
}

// ended reports the end of h to the observer, once its start has been
// told (see lease.Hold.AfterStarted), and, for a lost lease, to the log.
func (c *Client) ended(h *lease.Hold, why lease.EndReason, cause error) {
	lost := why == lease.EndLost || why == lease.EndForced
	if !lost && c.obs.Released == nil {
		return // nothing to tell, nor to log
	}
	e := HoldEvent{Kind: Kind(h.Ref.Kind), Name: h.Ref.Name, Held: time.Since(h.Taken), Outcome: OutcomeReleased}
	tell := c.obs.Released
	if lost {
		e.Cause, e.Outcome, tell = cause, OutcomeLost, c.obs.LeaseLost
		c.log.Warn("redisync: lease lost", "kind", e.Kind, "name", e.Name, "owner", h.Field, "held", e.Held, "cause", cause)
	}
	if tell != nil {
		tellEnd(h, tell, e)
	}
}

// tellEnd tells e to tell once h's start has been told (a function of its
// own, so that ended does not move e to the heap when there is no one to
// tell).
func tellEnd(h *lease.Hold, tell func(context.Context, HoldEvent), e HoldEvent) {
	if vals, ok := h.StartedValues(); ok {
		tell(vals, e) // the common case: no report to hold back
		return
	}
	h.AfterStarted(func(ctx context.Context) { tell(ctx, e) })
}

// subLost tells the observer that the subscription connection to node
// was lost, by err.
func (c *Client) subLost(node string, err error) {
	if c.obs.SubscriptionLost != nil {
		c.obs.SubscriptionLost(SubscriptionEvent{Node: node, Err: err})
	}
}

// subRestored tells the observer that the subscription connection to node
// answers again, after down.
func (c *Client) subRestored(node string, down time.Duration) {
	if c.obs.SubscriptionRestored != nil {
		c.obs.SubscriptionRestored(SubscriptionEvent{Node: node, Down: down})
	}
}

// modeChanged tells the observer that the pub/sub mode is now to.
func (c *Client) modeChanged(from, to PubSubMode) {
	if c.obs.PubSubModeChanged != nil {
		c.obs.PubSubModeChanged(PubSubModeEvent{From: from, To: to})
	}
}

// renewed tells the observer of a renewal round.
func (c *Client) renewed(r lease.Round) {
	if c.obs.Renewed != nil {
		c.obs.Renewed(RenewalEvent{Holds: r.Holds, RoundTrips: r.RoundTrips, Lost: r.Lost, Failed: r.Failed, Took: r.Took})
	}
}

// waitStarted tells the observer of the start of a first acquisition of
// ref, with the caller's ctx, and returns the context the wait goes on
// with (nil: ctx).
func (c *Client) waitStarted(ctx context.Context, ref lease.Ref) context.Context {
	if c.obs.WaitStarted == nil {
		return nil
	}
	return c.obs.WaitStarted(ctx, HoldEvent{Kind: Kind(ref.Kind), Name: ref.Name})
}

// acquired tells the observer of a first acquisition of ref that made a
// hold, after wait (by a handoff, in memory or by script, with handoff):
// Acquired with the wait's ctx, then HoldStarted with the caller's
// (parent), whose answer it returns (nil: none).
func (c *Client) acquired(ctx, parent context.Context, ref lease.Ref, wait time.Duration, handoff bool) context.Context {
	e := HoldEvent{Kind: Kind(ref.Kind), Name: ref.Name, Wait: wait, Handoff: handoff}
	if c.obs.Acquired != nil {
		e.Outcome = OutcomeAcquired
		c.obs.Acquired(ctx, e)
	}
	if c.obs.HoldStarted == nil {
		return nil
	}
	e.Outcome = ""
	return c.obs.HoldStarted(parent, e)
}

// failedEvent tells the observer of a first acquisition of ref that failed
// with err after wait; ctx is the wait's.
func (c *Client) failedEvent(ctx context.Context, ref lease.Ref, wait time.Duration, err error) {
	if c.obs.AcquireFailed != nil {
		c.obs.AcquireFailed(ctx, HoldEvent{Kind: Kind(ref.Kind), Name: ref.Name, Wait: wait, Cause: err, Outcome: waitOutcome(err)})
	}
}
