package redisync

import (
	"fmt"
	"time"
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
