package redisync

import (
	"fmt"
	"log/slog"
	"time"
)

// Observer is told what a Client's holds do, for metrics: plug in
// Prometheus, OpenTelemetry or a counter of your own. Any field may be nil.
// The functions are called synchronously, some on the path of Lock and
// Unlock, so they must be fast and must not block or call back into the
// Client.
type Observer struct {
	// Acquired is called when a hold is taken (not on a re-entry), with
	// how long the call waited for it.
	Acquired func(HoldEvent)
	// Released is called when a hold ends without losing its lease: its
	// last release, the end of the context it was taken with, Close.
	Released func(HoldEvent)
	// LeaseLost is called when a hold ends because its lease was lost, or
	// could no longer be trusted, or was taken by ForceUnlock.
	LeaseLost func(HoldEvent)
	// Renewed is called after each round of the watchdog.
	Renewed func(RenewalEvent)
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
	Wait  time.Duration // Acquired: from the call to the grant
	Held  time.Duration // Released, LeaseLost: from the grant to the end
	Cause error         // LeaseLost: why (matches ErrLeaseLost)
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

// WithObserver has the Client report its holds and renewals to o (see
// Observer). A nil o is refused.
func WithObserver(o *Observer) Option {
	return func(c *Client) error {
		if o == nil {
			return fmt.Errorf("%w: nil Observer", ErrInvalid)
		}
		c.obs = *o
		return nil
	}
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
func (c *Client) ended(h *hold, why endReason, cause error) {
	e := HoldEvent{Kind: h.ref.kind, Name: h.ref.name, Held: time.Since(h.taken)}
	if why == endLost || why == endForced {
		e.Cause = cause
		c.log.Warn("redisync: lease lost", "kind", e.Kind, "name", e.Name, "owner", h.field, "held", e.Held, "cause", cause)
		if c.obs.LeaseLost != nil {
			c.obs.LeaseLost(e)
		}
		return
	}
	if c.obs.Released != nil {
		c.obs.Released(e)
	}
}
