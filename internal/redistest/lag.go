package redistest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Lag measures this machine's scheduling delay while a test's timed
// section runs: how much later than asked a goroutine that sleeps wakes
// (its timer fired, but no thread ran it; or the process was not on a
// CPU). On a quiet machine that is well under a millisecond; beside busy
// loops and other test jobs it reaches tens or hundreds of milliseconds,
// and every goroutine of the code under test waits as long. A wall-clock
// bound that adds Slack to what the code promises then fails for the
// code's own delays, not for the machine's.
type Lag struct {
	worst atomic.Int64 // nanoseconds
	once  sync.Once
	stop  chan struct{}
	done  chan struct{}
}

// lagTick is how often a Lag looks: its own cost is one wake-up per tick.
const lagTick = 5 * time.Millisecond

// LagHops is how many times one timed path is counted to meet the worst
// delay seen: a call crosses several goroutines (its caller, a writer, a
// reader, a subscription's reader, a waiter) and a redis-server, each of
// which can be kept off a CPU.
const LagHops = 4

// WatchLag starts a Lag, stopped when the test ends (or by Stop).
func WatchLag(tb testing.TB) *Lag {
	l := StartLag()
	tb.Cleanup(l.Stop)
	return l
}

// StartLag starts a Lag that only Stop stops.
func StartLag() *Lag {
	l := &Lag{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tm := time.NewTimer(lagTick)
		defer tm.Stop()
		for {
			asked := time.Now()
			tm.Reset(lagTick)
			select {
			case <-l.stop:
				return
			case <-tm.C:
			}
			if late := time.Since(asked) - lagTick; int64(late) > l.worst.Load() {
				l.worst.Store(int64(late))
			}
		}
	}()
	return l
}

// Stop ends the measurement; Worst and Slack then keep what it saw.
func (l *Lag) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}

// Worst is the longest scheduling delay seen so far.
func (l *Lag) Worst() time.Duration { return time.Duration(l.worst.Load()) }

// Slack is what a bound on a timed path adds for the machine: LagHops
// times the worst delay seen so far.
func (l *Lag) Slack() time.Duration { return LagHops * l.Worst() }
