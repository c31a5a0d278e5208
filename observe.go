package redisync

import (
	"context"
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
// ...), for its values (a trace's span, request attributes). It may have
// ended; its end may be why the hold or the wait ended.
type Observer struct {
	// Acquired is called when a hold is taken (not on a re-entry), with
	// how long the call waited for it.
	Acquired func(ctx context.Context, e HoldEvent)
	// AcquireFailed is called when a call that would have taken a hold
	// returns without one, with how long it waited (Wait) and the error it
	// returns (Cause): not acquired (TryLock, the bound of TryLockFor),
	// its context ended, the Client closed, Redis failed. It is not called
	// for a re-entry, nor for a call refused before it tried (bad input,
	// a context that had already ended).
	AcquireFailed func(ctx context.Context, e HoldEvent)
	// Released is called when a hold ends without losing its lease: its
	// last release, the end of the context it was taken with, Close.
	Released func(ctx context.Context, e HoldEvent)
	// LeaseLost is called when a hold ends because its lease was lost, or
	// could no longer be trusted, or was taken by ForceUnlock.
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

// The kinds of hold, as HoldEvent.Kind reports them. They are plain
// strings, so a comparison with the literal works as well.
const (
	KindMutex     = "lock"      // a hold of a Mutex
	KindFairMutex = "fair lock" // a hold of a FairMutex
	KindRWRead    = "rw read"   // a read hold of an RWMutex
	KindRWWrite   = "rw write"  // a write hold of an RWMutex
	KindSemaphore = "semaphore" // a hold of a Semaphore's permits
	KindMultiLock = "multilock" // a hold of a MultiLock (its Name: its names, quoted)
	KindElection  = "election"  // a leadership of an Election
)

// HoldEvent describes one hold of one lock.
type HoldEvent struct {
	Kind  string        // KindMutex, KindFairMutex, KindRWRead, KindRWWrite, KindSemaphore, KindMultiLock or KindElection
	Name  string        // the lock's name
	Wait  time.Duration // Acquired: from the call to the grant; AcquireFailed: from the call to its return
	Held  time.Duration // Released, LeaseLost: from the grant to the end
	Cause error         // LeaseLost: why (matches ErrLeaseLost); AcquireFailed: the call's error
	// Handoff is set on Acquired when a holder in this Client handed the
	// lock straight to this waiter (a Mutex's cohort handoff, see
	// Mutex.Unlock), with no unlock message and no race.
	Handoff bool
}

// RenewalEvent describes one round of the watchdog.
type RenewalEvent struct {
	Holds      int           // leases the round renewed or tried to
	RoundTrips int           // pipelines it sent
	Lost       int           // holds Redis no longer had
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
// times, it adds each: every observer is told, in the order given. A nil o
// is refused.
func WithObserver(o *Observer) Option {
	return func(c *Client) error {
		if o == nil {
			return fmt.Errorf("%w: nil Observer", ErrInvalid)
		}
		c.obs = Observer{
			Acquired:             both(c.obs.Acquired, o.Acquired),
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

// ended reports the end of h to the observer and, for a lost lease, the log.
func (c *Client) ended(h *lease.Hold, why lease.EndReason, cause error) {
	e := HoldEvent{Kind: h.Ref.Kind, Name: h.Ref.Name, Held: time.Since(h.Taken)}
	if why == lease.EndLost || why == lease.EndForced {
		e.Cause = cause
		c.log.Warn("redisync: lease lost", "kind", e.Kind, "name", e.Name, "owner", h.Field, "held", e.Held, "cause", cause)
		if c.obs.LeaseLost != nil {
			c.obs.LeaseLost(h.Parent, e)
		}
		return
	}
	if c.obs.Released != nil {
		c.obs.Released(h.Parent, e)
	}
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

// acquiredEvent tells the observer of a first acquisition of ref that made
// a hold, after wait (by a handoff, in memory or by script, with handoff).
func (c *Client) acquiredEvent(ctx context.Context, ref lease.Ref, wait time.Duration, handoff bool) {
	if c.obs.Acquired != nil {
		c.obs.Acquired(ctx, HoldEvent{Kind: ref.Kind, Name: ref.Name, Wait: wait, Handoff: handoff})
	}
}

// failedEvent tells the observer of a first acquisition of ref that failed
// with err after wait.
func (c *Client) failedEvent(ctx context.Context, ref lease.Ref, wait time.Duration, err error) {
	if c.obs.AcquireFailed != nil {
		c.obs.AcquireFailed(ctx, HoldEvent{Kind: ref.Kind, Name: ref.Name, Wait: wait, Cause: err})
	}
}
