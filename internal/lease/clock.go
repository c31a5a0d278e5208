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
// monotonic clock plus how far the wall clock got ahead of it (its lead)
// since the deadline was set: both readings are in every time.Now(), so
// this costs no system call.
//
// A wall clock stepped back (NTP, by hand) never makes a deadline later,
// and does not hide a suspend that follows it: what counts is every rise
// of the lead from the lowest it was seen at, and the process keeps a
// meter of those rises (gain), moved by every reading of the clock (the
// holds' contexts read it, and each Keeper's watchdog at least every
// jumpEvery). A deadline notes the meter when it is set, and counts what
// the meter gained since. A wall clock stepped forward counts as elapsed
// time: a holder is then told early, never late. A step back and a
// suspend of the same length between two readings cannot be told from
// nothing happening; the watchdog reads the clock every second.

// monoBase is the origin of the holds' deadlines.
var monoBase = time.Now()

// TestSuspend is added to every lead: tests stand for a suspend (or a
// wall clock stepped forward) with a rise of it, and for a wall clock
// stepped back with a fall (see suspend_test.go). Always 0 otherwise.
var TestSuspend atomic.Int64

// clockAt is a moment on the holds' clock: t's monotonic reading and the
// wall clock's lead over it, both since monoBase, and, for a reading or
// a deadline set (see stamp), the meter's gain then.
type clockAt struct{ mono, lead, gain int64 }

func clockOf(t time.Time) clockAt {
	mono := int64(t.Sub(monoBase))
	return clockAt{mono: mono, lead: t.UnixNano() - monoBase.UnixNano() - mono + TestSuspend.Load()}
}

// meter counts the rises of the lead: gain is their sum up to the
// reading whose lead was last. A reading with lead l stands at gain +
// max(0, l-last); a reading that moved the lead by meterStep or more
// records itself, so that a fall is remembered as the new low.
type meter struct{ last, gain int64 }

// meterStep is the least move of the lead that a reading records: the
// lead moves only when the wall clock is stepped or the machine was
// suspended, and a smaller move costs at most that much of a suspend.
const meterStep = int64(time.Millisecond)

var theMeter atomic.Pointer[meter]

func init() { theMeter.Store(&meter{last: clockOf(monoBase).lead}) }

// now reads the holds' clock. The meter is loaded before the time is
// read, so a reading taken before a wall clock step that another reading
// has recorded (a goroutine preempted in between) is never taken for a
// rise: it reads the time again.
func now() clockAt {
	for {
		m := theMeter.Load()
		c := clockOf(time.Now())
		c.gain = m.gain + max(0, c.lead-m.last)
		if d := c.lead - m.last; d < meterStep && d > -meterStep {
			return c
		}
		if theMeter.CompareAndSwap(m, &meter{last: c.lead, gain: c.gain}) {
			return c
		}
	}
}

// stamp returns t on the holds' clock, to count from. t carries the
// readings of a moment not later than now (a script's sending, or a time
// added to it): its gain is the meter's now, less the lead's rise from t's
// readings to now (a suspend between the script's sending and its reply,
// as far as those two readings show it).
func stamp(t time.Time) clockAt { return stampAt(t, now()) }

// stampAt is stamp with the clock read at n.
func stampAt(t time.Time, n clockAt) clockAt {
	a := clockOf(t)
	a.gain = n.gain - max(0, n.lead-a.lead)
	return a
}

// since returns how long it is from a to now on the holds' clock: the
// monotonic time, plus what the meter gained meanwhile (a suspend).
func (a clockAt) since(now clockAt) int64 { return now.pos() - a.pos() }

// pos is a's place on the holds' clock: all that the distance between two
// moments needs (see since), one number to store; counted from posOrigin,
// so that it is never 0 (a hold's dlStore: none).
func (a clockAt) pos() int64 { return posOrigin + a.mono + a.gain }

// posOrigin puts every moment's pos above 0 (146 years of a clock's gain).
const posOrigin = 1 << 62

// before reports whether a comes before b on the holds' clock.
func (a clockAt) before(b clockAt) bool { return a.mono+a.gain < b.mono+b.gain }

// jumpEvery is how often the watchdog reads the clock, to record a wall
// clock stepped back and to see whether the machine was suspended (the
// meter jumped) and tell the holds whose deadlines passed meanwhile,
// whose timers (monotonic) would fire late; jumpSlack is a jump it
// ignores.
const (
	jumpEvery = time.Second
	jumpSlack = 20 * time.Millisecond
)
