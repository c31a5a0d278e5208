package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Issue 42, break 5, with a real process: a child (this test binary, re-run
// as TestHelperStoppedPastBoth, on one CPU) takes a hold with a fixed lease
// under a context that ends on its own, and waits for that end without
// looking at the hold; it is stopped (SIGSTOP) past the lease's deadline
// and the context's, and continued. On resuming, every timer is due and
// the runtime runs them in an order of its own. The end that came first
// in time is the one told, whichever runs first: the lease's ("lease
// first": ErrLeaseLost, from the hold's context and from Unlock), or the
// context's ("context first": context.DeadlineExceeded, and Unlock
// returns nil). A cancellation without a deadline counts from when the
// process sees it ("cancelled on resuming", by a goroutine whose timer is
// the first due, as a signal's handler would): after the lease's deadline.
// On main the cancellation reached the hold's context first every time
// (cause context.Canceled); the deadlines' trials were decided by the
// order of the timers (2 of 14 trials told the wrong end in one run of
// four, none in the others).
func TestStoppedPastLeaseAndDeadline(t *testing.T) {
	t.Parallel() // its own server, mostly waiting
	srv := redistest.Start(t)
	ch := startChild(t, "TestHelperStoppedPastBoth", orderChildEnv+"="+srv.Addr(), "GOMAXPROCS=1")
	inTime := 0
	for i, tr := range orderTrials {
		f := strings.Fields(ch.next(fmt.Sprintf("ready %d ", i)))
		ch.signal(syscall.SIGSTOP)
		stoppedAt := time.Now()
		created, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		time.Sleep(time.Until(stoppedAt.Add(orderStop)))
		ch.signal(syscall.SIGCONT)
		got := pausedFields(ch.next(fmt.Sprintf("result %d ", i)))
		// The stop must come before the first of the two ends; on a busy
		// machine it may come late, and the trial shows nothing.
		late := stoppedAt.Sub(time.Unix(0, created))
		if first := tr.first(); late > first-50*time.Millisecond {
			t.Logf("trial %d (%s): stopped %v after the context was made, past the first end (%v): not counted", i, tr, late, first)
			continue
		}
		inTime++
		t.Logf("trial %d (%s): stopped after %v: %v", i, tr, late.Round(time.Millisecond), got)
		if tr.end != orderContextFirst {
			assert.Equal(t, "lease lost", got["cause"], "trial %d (%s): the lease ran out first", i, tr)
			assert.Equal(t, "lease lost", got["unlock"], "trial %d (%s)", i, tr)
		} else {
			assert.Equal(t, "context deadline exceeded", got["err"], "trial %d (%s): the context ended first", i, tr)
			assert.Equal(t, "context deadline exceeded", got["cause"], "trial %d (%s)", i, tr)
			assert.Equal(t, "nil", got["unlock"], "trial %d (%s): the hold was the caller's until its context ended", i, tr)
		}
	}
	ch.next("done")
	if inTime == 0 {
		t.Fatal("no stop came in time: the machine is too busy for this test")
	}
}

const (
	orderChildEnv = "REDISYNC_ORDER_CHILD"
	orderLease    = 600 * time.Millisecond  // fixed: its local deadline is 539ms after the script's sending
	orderStop     = 1100 * time.Millisecond // past both ends
	orderLater    = 800 * time.Millisecond  // a context's deadline after the lease's
	orderSooner   = 300 * time.Millisecond  // and one before it
	orderPermits  = 1                       // the trials' semaphores
)

// The ends of the context a trial's hold is taken with.
const (
	orderLeaseFirst   = "lease first"           // a deadline after the lease's (orderLater)
	orderContextFirst = "context first"         // a deadline before it (orderSooner)
	orderCancelled    = "cancelled on resuming" // no deadline: cancelled once the stop is seen
)

// orderTrial is one stop of the child: the kind of lock it holds, and how
// the context it takes it with ends.
type orderTrial struct {
	kind string // "mutex", "fair", "rw write", "rw read", "semaphore", "multilock", "election"
	end  string // orderLeaseFirst, orderContextFirst or orderCancelled
}

func (tr orderTrial) String() string { return tr.kind + ", " + tr.end }

// first is how long after the context's making the first of the two ends
// comes: the stop must come before it.
func (tr orderTrial) first() time.Duration {
	if tr.end == orderContextFirst {
		return orderSooner
	}
	return orderLease * 9 / 10
}

var orderTrials = func() []orderTrial {
	var ts []orderTrial
	for _, end := range []string{orderCancelled, orderLeaseFirst, orderContextFirst} {
		for _, kind := range []string{"mutex", "fair", "rw write", "rw read", "semaphore", "multilock", "election"} {
			ts = append(ts, orderTrial{kind, end})
		}
	}
	return ts
}()

// TestHelperStoppedPastBoth is the child process of
// TestStoppedPastLeaseAndDeadline (skipped unless that test started it).
// It reports on stdout, each line prefixed "child: ".
func TestHelperStoppedPastBoth(t *testing.T) {
	c, _ := childClient(t, orderChildEnv, "TestStoppedPastLeaseAndDeadline", 30*time.Second)
	bg := context.Background()
	fixed := WithLease(orderLease)
	for i, tr := range orderTrials {
		name := fmt.Sprintf("order:%d:%s", i, strings.ReplaceAll(tr.kind, " ", "-"))
		var lock func(context.Context) (context.Context, error)
		var unlock func(context.Context) error
		switch tr.kind {
		case "mutex":
			m := c.Mutex(name, fixed)
			lock, unlock = m.Lock, m.Unlock
		case "fair":
			f := c.FairMutex(name, fixed)
			lock, unlock = f.Lock, f.Unlock
		case "rw write":
			r := c.RWMutex(name, fixed)
			lock, unlock = r.Lock, r.Unlock
		case "rw read":
			r := c.RWMutex(name, fixed)
			lock, unlock = r.RLock, r.RUnlock
		case "semaphore":
			s := c.Semaphore(name, fixed)
			require.NoError(t, s.SetPermits(bg, orderPermits))
			lock = func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, orderPermits) }
			unlock = func(ctx context.Context) error { return s.Release(ctx, orderPermits) }
		case "multilock":
			m := c.MultiLock([]string{name + ":a", name + ":b"}, fixed)
			lock, unlock = m.Lock, m.Unlock
		case "election":
			e := c.Election(name, fixed)
			lock = func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, "child") }
			unlock = e.Resign
		}
		created := time.Now()
		var parent context.Context
		var cancel context.CancelFunc
		switch tr.end {
		case orderLeaseFirst:
			parent, cancel = context.WithTimeout(bg, orderLater)
		case orderContextFirst:
			parent, cancel = context.WithTimeout(bg, orderSooner)
		default:
			parent, cancel = context.WithCancel(bg)
			go func() {
				// Its sleep's timer is the first due on resuming.
				// last is the previous look's time: a stop between any
				// two looks is seen by the second (taking the time again
				// after the look would miss one that fell between).
				for last := time.Now(); ; {
					time.Sleep(time.Millisecond)
					now := time.Now()
					if now.Sub(last) > orderLease || parent.Err() != nil {
						cancel()
						return
					}
					last = now
				}
			}()
		}
		lctx, err := lock(parent)
		require.NoError(t, err, "trial %d (%s)", i, tr)
		require.NoError(t, lctx.Err(), "trial %d (%s)", i, tr)
		childSays("ready %d %d %s", i, created.UnixNano(), tr)
		// Blocked, not spinning: on resuming, the runtime runs the due
		// timers before this goroutine, in the order it picks.
		<-parent.Done()
		word := func(err error) string {
			switch {
			case err == nil:
				return "nil"
			case errors.Is(err, ErrLeaseLost):
				return "lease lost"
			case errors.Is(err, context.DeadlineExceeded):
				return "context deadline exceeded"
			case errors.Is(err, context.Canceled):
				return "canceled"
			}
			return err.Error()
		}
		errText, cause := word(lctx.Err()), word(context.Cause(lctx))
		unlocked := word(unlock(lctx))
		cancel()
		field := func(s string) string { return strings.ReplaceAll(s, " ", "_") }
		childSays("result %d err=%s cause=%s unlock=%s", i, field(errText), field(cause), field(unlocked))
	}
	childSays("done")
}
