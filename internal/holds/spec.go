package holds

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// Spec is what a lock handle tells the hold machinery about itself.
type Spec struct {
	Ref     lease.Ref
	Lease   time.Duration
	Renewed bool // a watchdog lease, renewed while held (else WithLease's fixed one)
	Fenced  bool // WithFencing: first acquisitions get a token
	// Counts says the acquisition and re-entry scripts answer one
	// integer instead of [1, count, ...] (lua/lock.lua without a fencing
	// counter): see Took.
	Counts bool
	Wrap   func(error) error

	Parts  bool        // a hold is on several locks (see lease.Hold.Parts)
	Covers []lease.Ref // those locks (see lease.Hold.Covers)

	// Busy, when set, says who holds the lock, for the error of a wait
	// that ended while it was busy (see Acquisition.explain).
	Busy Busy
}

// Busy describes who holds a lock now ("held by ..."), in one read of
// it, which it bounds itself, short: the wait it explains has ended, and
// its caller waits for the answer. "" when it cannot tell in time.
type Busy interface {
	Busy(ctx context.Context) string
}

// LeaseText describes a lease for an error message.
func LeaseText(d time.Duration, renewed bool) string {
	if renewed {
		return fmt.Sprintf("watchdog lease of %v", d)
	}
	return fmt.Sprintf("fixed lease of %v (WithLease)", d)
}

// FencingText describes a lock's fencing for an error message.
func FencingText(fenced bool) string {
	if fenced {
		return "with WithFencing"
	}
	return "without WithFencing"
}
