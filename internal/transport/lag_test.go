package transport

import (
	"sync/atomic"
	"testing"
	"time"
)

// lagWatch measures the machine's scheduling delay while a timed section
// of a test runs: how much later than asked a goroutine that sleeps wakes
// (as the root package's lagWatch, helpers_test.go). A bound on a timed
// path adds Slack, so that it fails for the transport's own delays, not
// for the machine's.
type lagWatch struct {
	worst atomic.Int64 // nanoseconds
	stop  chan struct{}
	done  chan struct{}
}

// lagTick is how often a lagWatch looks.
const lagTick = 5 * time.Millisecond

// lagHops is how many times a timed path is counted to meet the worst
// delay seen: a call crosses its caller, a writer, a reader and a
// redis-server, each of which can be kept off a CPU.
const lagHops = 4

// watchLag starts a lagWatch; Stop (or the test's end) stops it.
func watchLag(t testing.TB) *lagWatch {
	l := &lagWatch{stop: make(chan struct{}), done: make(chan struct{})}
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
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the measurement; Worst and Slack keep what it saw.
func (l *lagWatch) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// Worst is the longest scheduling delay seen so far.
func (l *lagWatch) Worst() time.Duration { return time.Duration(l.worst.Load()) }

// Slack is what a bound on a timed path adds for the machine.
func (l *lagWatch) Slack() time.Duration { return lagHops * l.Worst() }
