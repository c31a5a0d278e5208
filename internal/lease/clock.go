package lease

import (
	"sync/atomic"
	"time"
)

// The holds' clock. A hold's local deadline must count every moment its
// lease runs in Redis, the time the machine was suspended included (a
// laptop's lid closed, a VM suspended by its guest). Go's monotonic clock,
// which timers and time.Since read, stops during a suspend (on Linux it is
// CLOCK_MONOTONIC); the wall clock does not. So the holds' clock is the
// monotonic clock plus how far the wall clock got ahead of it since the
// script that set the lease was sent (its lead): both readings are in every
// time.Now(), so this costs no system call. A wall clock stepped back
// (NTP, by hand) never makes a deadline later: only a lead that grew
// counts. A wall clock stepped forward counts as elapsed time: a holder is
// then told early, never late.

// monoBase is the origin of the holds' deadlines.
var monoBase = time.Now()

// TestSuspend is added to every lead: tests stand for a suspend with it
// (see suspend_test.go). Always 0 otherwise.
var TestSuspend atomic.Int64

// clockAt is a moment on the holds' clock: t's monotonic reading, and the
// wall clock's lead over it, both since monoBase.
type clockAt struct{ mono, lead int64 }

func clockOf(t time.Time) clockAt {
	mono := int64(t.Sub(monoBase))
	return clockAt{mono: mono, lead: t.UnixNano() - monoBase.UnixNano() - mono + TestSuspend.Load()}
}

// since returns how long it is from a to now on the holds' clock: the
// monotonic time, plus the wall clock's lead gained meanwhile (a suspend).
func (a clockAt) since(now clockAt) int64 {
	return now.mono - a.mono + max(0, now.lead-a.lead)
}

// jumpEvery is how often the watchdog looks whether the wall clock jumped
// ahead of the monotonic one (the machine was suspended), to tell the
// holds whose deadlines passed meanwhile, whose timers (monotonic) would
// fire late; jumpSlack is a jump it ignores.
const (
	jumpEvery = time.Second
	jumpSlack = 20 * time.Millisecond
)
