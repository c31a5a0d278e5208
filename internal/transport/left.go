package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Calls whose callers left. A caller whose context ends before its reply
// leaves at once, and its call stays in flight until its reply comes, to
// give back what it took (late). On a stalled Redis (a paused process, a
// silent link) replies do not come, and those calls would pile up: in
// go-redis's full-duplex queue, whose room a new call would then wait for
// however short its context, each with a goroutine and its command in
// memory. So a Client keeps at most fdMaxLeft such calls in flight on the
// full-duplex path (fewer when go-redis's window is smaller: see
// left.max), on a Cluster for each master (go-redis has a queue for each,
// and a stalled master must not hold up the calls to the others:
// TestClusterStalledMasterHoldsNoOther); while it has that many, a new
// call waits for one of them to end, as long as its context lasts, and
// then leaves without having been sent at all (ErrNotSent). What a
// stalled Redis costs the Client is bounded: fdMaxLeft calls (per master)
// and what they bring with them, and its live callers' own calls. Measured (TestSweepStalled, 20,000
// TryLocks abandoned on a paused Redis, a user's hook installed): about
// 1,100 calls handed to go-redis, 3,300 goroutines (each call's, the
// sweep of a TryLock whose outcome is unknown, go-redis's host of the
// hook), 6 MiB of heap and 13 MiB of stacks.
const fdMaxLeft = 1024

// ErrNotSent is what the error of a call that was not sent wraps (with
// its context's error): nothing of it ran in Redis, nothing is to be given
// back, and its late is not called.
var ErrNotSent = errors.New("not sent")

// notSent returns the error of a call that was not sent because its
// context ended (cause): why, and that error.
func notSent(cause error, why string) error {
	return fmt.Errorf("redisync: %w (%s): %w", ErrNotSent, why, cause)
}

// left counts a Transport's calls on the full-duplex path whose callers
// left, and has new calls wait while there are fdMaxLeft of them.
type left struct {
	n    atomic.Int32
	max  int32 // the bound: fdMaxLeft, at most go-redis's window (set with the pipeliner)
	mu   sync.Mutex
	room chan struct{} // closed when n falls below max; nil: nobody waits
}

// add changes the count by d, and wakes the calls waiting for room when
// it falls below l.max.
func (l *left) add(d int32) {
	if l.n.Add(d) >= l.max || d > 0 {
		return
	}
	l.mu.Lock()
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
	l.mu.Unlock()
}

// full reports whether there are l.max calls whose callers left.
func (l *left) full() bool { return l.n.Load() >= l.max }

// admit waits until there are fewer than l.max calls whose callers
// left, or until ctx ends: then its error says the call was not sent.
func (l *left) admit(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.n.Load() < l.max {
			l.mu.Unlock()
			return nil
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return notSent(ctx.Err(), fmt.Sprintf("%d earlier calls whose callers left have had no reply from Redis", l.max))
		}
	}
}
