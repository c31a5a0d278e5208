package redisync

import (
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// MinLease is the shortest lease redisync accepts (WithLease,
// WithWatchdogTimeout): below it, Redis's millisecond clock and a timer's
// latency leave no room to tell a holder before its lease runs out.
const MinLease = 20 * time.Millisecond

// MaxLease is the longest lease redisync accepts: a year.
const MaxLease = 365 * 24 * time.Hour

// checkLease refuses a lease (what names it) outside MinLease..MaxLease.
func checkLease(what string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s %v is not positive", ErrInvalid, what, d)
	case d < MinLease:
		return fmt.Errorf("%w: %s %v is below MinLease (%v)", ErrInvalid, what, d, MinLease)
	case d > MaxLease:
		return fmt.Errorf("%w: %s %v is above MaxLease (%v)", ErrInvalid, what, d, MaxLease)
	}
	return nil
}

// spec is what a lock handle tells the hold machinery about itself.
type spec struct {
	ref     lease.Ref
	lease   time.Duration
	renewed bool
	fenced  bool // WithFencing: first acquisitions get a token
	wrap    func(error) error

	parts  bool        // a hold is on several locks (see hold.parts)
	covers []lease.Ref // those locks (see hold.covers)
}

func leaseText(d time.Duration, renewed bool) string {
	if renewed {
		return fmt.Sprintf("watchdog lease of %v", d)
	}
	return fmt.Sprintf("fixed lease of %v (WithLease)", d)
}
