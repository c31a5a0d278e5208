package cohort

import (
	"context"
	"sync"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// The bounds of a run of local handoffs, and how long this client's
// waiters hold back after one (see above).
const (
	Run   = 16
	Time  = 5 * time.Millisecond
	Yield = time.Millisecond
)

// Acceptor is what a waiter that can be handed the lock tells the releaser.
type Acceptor struct {
	Key     string // the lock's: a channel may be shared by two names
	Lease   time.Duration
	Renewed bool                              // the lease is the watchdog's (not WithLease)
	Fence   string                            // the fencing counter's key, or "" (WithFencing)
	Field   func() string                     // the waiter's owner
	Release func(field string) transport.Call // gives a handed lock back
	// Take makes the hold from a delivered handoff, as an attempt would.
	Take func(h *Handoff) (done bool, next time.Duration, err error)
}

// Queue is a Client's bookkeeping of Queue handoffs: the waiters that
// can be handed a lock, the runs of handoffs per lock, and the yields that
// end them. It has its own lock, and knows nothing of the subscription
// but what it is handed: a way to wake each waiter.
type Queue struct {
	closedErr error // what Handed returns once its closed channel is

	mu      sync.Mutex
	entries map[string][]*Entry       // by lock key, in arrival order
	byChan  map[string]map[string]int // channel -> lock key -> entries
	runs    map[string]*handoffRun    // by lock key
}

// NewQueue returns an empty queue; Handed returns closedErr once the
// owner is closed.
func NewQueue(closedErr error) *Queue {
	return &Queue{closedErr: closedErr, entries: map[string][]*Entry{}, byChan: map[string]map[string]int{}, runs: map[string]*handoffRun{}}
}

// Entry is one waiting goroutine that can be handed the lock. Its fields
// are guarded by the cohort's lock.
type Entry struct {
	acc     *Acceptor
	channel string
	wake    func()          // wakes the waiter, without blocking
	woken   <-chan struct{} // where the waiter is woken
	idle    bool            // waiting, not trying: it may be handed the lock
	h       *Handoff        // the handoff it is reserved for
}

// Handoff is a lock being handed to one waiter. Its state is guarded by
// the cohort's lock.
type Handoff struct {
	e       *Entry
	Acc     *Acceptor      // the waiter's
	Field   string         // the waiter's owner when claimed
	Release transport.Call // from acc, set by the releaser
	St      lease.Stamp    // of the releaser's script

	Bounded bool // the run's bound is reached: release for other clients
	Granted bool
	Reply   []int64       // the script's reply when granted
	Next    time.Duration // when not granted: how long to wait at most
	Err     error         // the outcome is unknown

	delivered bool // the outcome is in; the waiter is woken
	abandoned bool // the waiter left before the outcome came: give it back
}

// handoffRun is one lock's run of local handoffs in this client. It is kept
// by lock key: two names may share a channel. It lives while the run does,
// and then as long as the client's waiters yield.
type handoffRun struct {
	n          int       // handoffs in a row
	start      time.Time // when the run's first was claimed
	yieldUntil time.Time // this client's waiters hold back until then
	// releasing: the run reached its bound, and its last handoff's script
	// may free the lock for another client: this client's waiters hold
	// back from now on, or its unlock message, which can reach them
	// before the script's reply, would let one take the lock back.
	releasing bool
}

// Blocking returns the acceptor of a waiter of lock key that takes no
// handoffs (a MultiLock of the name): in line with those that do, it keeps
// the lock from being handed past it, so that a MultiLock waiting in a
// Client whose goroutines hand the lock to each other still gets its turn.
func Blocking(key string) *Acceptor { return &Acceptor{Key: key} }

// Join registers a waiter on channel that can be handed the lock acc
// names; wake wakes it without blocking, on woken. The entry must be left
// with Leave.
func (co *Queue) Join(channel string, acc *Acceptor, wake func(), woken <-chan struct{}) *Entry {
	e := &Entry{acc: acc, channel: channel, wake: wake, woken: woken}
	co.mu.Lock()
	defer co.mu.Unlock()
	co.entries[acc.Key] = append(co.entries[acc.Key], e)
	keys := co.byChan[channel]
	if keys == nil {
		keys = map[string]int{}
		co.byChan[channel] = keys
	}
	keys[acc.Key]++
	return e
}

// Leave removes e. It returns a handoff that was delivered to e and not
// taken, for the caller to give back; one still under way is marked
// abandoned, for its releaser to give back.
func (co *Queue) Leave(e *Entry) (untaken *Handoff) {
	co.mu.Lock()
	defer co.mu.Unlock()
	key := e.acc.Key
	es := co.entries[key]
	for i, x := range es {
		if x == e {
			es = append(es[:i:i], es[i+1:]...)
			break
		}
	}
	if len(es) == 0 {
		delete(co.entries, key)
	} else {
		co.entries[key] = es
	}
	if keys := co.byChan[e.channel]; keys != nil {
		if keys[key]--; keys[key] <= 0 {
			delete(keys, key)
		}
		if len(keys) == 0 {
			delete(co.byChan, e.channel)
		}
	}
	h := e.h
	e.h = nil
	switch {
	case h == nil:
		return nil
	case !h.delivered:
		h.abandoned = true
		return nil
	}
	return h
}

// endRun ends key's run: the lock was released, not handed over. Called
// with co.mu held.
func (co *Queue) endRun(key string) {
	if r := co.runs[key]; r != nil && !time.Now().Before(r.yieldUntil) {
		delete(co.runs, key)
	} else if r != nil {
		r.n = 0
	}
}

// Claim picks the first waiter of lock key that can be handed the lock
// now (it takes handoffs and is waiting, not trying), and reserves it: the
// waiter does not try again until the outcome is settled. It returns nil
// when there is none, or when a waiter that takes no handoffs (see
// Blocking) comes before it. confirmed says this client's subscription to the
// lock's channel is confirmed: mine is then 1, the subscriptions of this
// client Redis counts on it.
func (co *Queue) Claim(key string, confirmed bool) (h *Handoff, mine int) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, e := range co.entries[key] {
		if e.acc.Take == nil {
			break // it is freed, and its message wakes that waiter
		}
		if !e.idle || e.h != nil {
			continue
		}
		r := co.runs[key]
		if r == nil {
			r = &handoffRun{}
			co.runs[key] = r
		}
		if r.n == 0 {
			r.start = time.Now()
		}
		r.n++
		e.h = &Handoff{e: e, Acc: e.acc, Field: e.acc.Field(),
			Bounded: r.n > Run || time.Since(r.start) >= Time}
		r.releasing = e.h.Bounded
		if confirmed {
			mine = 1
		}
		return e.h, mine
	}
	co.endRun(key)
	return nil, 0
}

// Settle records the reply of h's script (see lua/handoff.lua) and wakes
// h's waiter. It returns false when the waiter has left meanwhile: the
// caller gives back what the script may have granted (giveBackHandoff).
func (co *Queue) Settle(h *Handoff, r []int64, err error) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	key := h.Acc.Key
	if run := co.runs[key]; run != nil {
		run.releasing = false
	}
	switch {
	case err != nil:
		h.Err = err
	case r[0] == 1:
		h.Granted, h.Reply = true, r
	case r[0] == 2:
		h.Next = Yield
		run := co.runs[key]
		if run == nil {
			run = &handoffRun{}
			co.runs[key] = run
		}
		run.yieldUntil = time.Now().Add(Yield)
		time.AfterFunc(Yield, func() {
			co.mu.Lock()
			defer co.mu.Unlock()
			if co.runs[key] == run && run.n == 0 {
				co.endRun(key)
			}
		})
	default:
		h.Next = lease.Bound(r[1], h.Acc.Lease/3)
	}
	if !h.Granted || h.Bounded {
		co.endRun(key) // a new run starts
	}
	if h.abandoned {
		return false
	}
	h.delivered = true
	h.e.wake()
	return true
}

// Yielding reports until when this client's waiter with acc holds back
// before it tries (never when acc is nil: it cannot be handed the lock).
func (co *Queue) Yielding(acc *Acceptor, now time.Time) (time.Time, bool) {
	if acc == nil {
		return time.Time{}, false
	}
	return co.KeyYielding(acc.Key, now)
}

// KeyYielding reports until when this client's callers of lock key hold
// back, after a run of handoffs ended with the lock released for other
// clients.
func (co *Queue) KeyYielding(key string, now time.Time) (time.Time, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.yieldingLocked(key, now)
}

func (co *Queue) yieldingLocked(key string, now time.Time) (time.Time, bool) {
	switch r := co.runs[key]; {
	case r == nil:
	case r.releasing:
		return now.Add(Yield), true // at least: see handoffRun
	case now.Before(r.yieldUntil):
		return r.yieldUntil, true
	}
	return time.Time{}, false
}

// ChanYielding is yielding for the locks whose waiters wait on channel:
// the subscription holds its wake-ups back until then.
func (co *Queue) ChanYielding(channel string, now time.Time) (time.Time, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for key := range co.byChan[channel] {
		if y, ok := co.yieldingLocked(key, now); ok {
			return y, true
		}
	}
	return time.Time{}, false
}

// SetIdle marks e as waiting (it may be handed the lock) or as trying, and
// returns the handoff e is reserved for, if any.
func (co *Queue) SetIdle(e *Entry, idle bool) (claimed *Handoff) {
	co.mu.Lock()
	defer co.mu.Unlock()
	e.idle = idle
	return e.h
}

// Handed waits for the outcome of the handoff e was reserved for and
// consumes it; it returns ctx's error if ctx ends first (leave then
// settles the handoff), and ErrClosed once closed is.
func (co *Queue) Handed(ctx context.Context, e *Entry, closed <-chan struct{}) (*Handoff, error) {
	for {
		co.mu.Lock()
		h := e.h
		if h.delivered {
			e.h = nil
			co.mu.Unlock()
			return h, nil
		}
		co.mu.Unlock()
		select {
		case <-e.woken:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-closed:
			return nil, co.closedErr
		}
	}
}

// Idle counts the waiters on channel that can be handed a lock now
// (waiting, not trying, not reserved): for diagnostics and tests.
func (co *Queue) Idle(channel string) int {
	co.mu.Lock()
	defer co.mu.Unlock()
	n := 0
	for _, es := range co.entries {
		for _, e := range es {
			if e.channel == channel && e.idle && e.h == nil {
				n++
			}
		}
	}
	return n
}
