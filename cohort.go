package redisync

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// Cohort handoff: a Mutex whose last hold is released while another
// goroutine of this Client waits for it is handed to that waiter instead of
// being freed, announced to every client and raced for. The lock is never
// free in between, so to every other client, Redisson included, it just
// has a holder.
//
// Most handoffs are made in memory, with no round trip: the Redis owner
// field stays as it is (one field for several local holders in turn, each
// with a hold of its own here), the watchdog goes on renewing it, and the
// new holder's hold keeps the lease's real deadline (when the script that
// last set it was sent). Exclusion is unchanged: Redis sees one owner, this
// Client, hold the lock throughout, and within the Client one hold lives
// at a time, the next granted only after the last one ended. A handoff
// that needs something only Redis can give is one script instead
// (lua/handoff.lua): a new fencing token (WithFencing), an acknowledgement
// by replicas (WithReplicaAck), a fresh fixed lease (WithLease), and the
// end of a run, which checks whether another client waits.
//
// A run of local handoffs is bounded, so that waiters in other clients get
// their turn: after cohortRun handoffs in a row, or once cohortTime has
// passed since the run's first, the lock is released for real, with its
// unlock message, if another client listens on its channel; this client's
// own waiters then hold back for cohortYield, so that a waiter of another
// client takes it.

// The bounds of a run of local handoffs, and how long this client's
// waiters hold back after one (see above).
const (
	cohortRun   = 16
	cohortTime  = 5 * time.Millisecond
	cohortYield = time.Millisecond
)

// acceptor is what a waiter that can be handed the lock tells the releaser.
type acceptor struct {
	key     string // the lock's: a channel may be shared by two names
	lease   time.Duration
	renewed bool                    // the lease is the watchdog's (not WithLease)
	fence   string                  // the fencing counter's key, or "" (WithFencing)
	field   func() string           // the waiter's owner
	release func(field string) call // gives a handed lock back
	// take makes the hold from a delivered handoff, as an attempt would.
	take func(h *handoff) (done bool, next time.Duration, err error)
}

// cohort is a Client's bookkeeping of cohort handoffs: the waiters that
// can be handed a lock, the runs of handoffs per lock, and the yields that
// end them. It has its own lock, and knows nothing of the subscription
// but what it is handed: a way to wake each waiter.
type cohort struct {
	mu      sync.Mutex
	entries map[string][]*waitEntry   // by lock key, in arrival order
	byChan  map[string]map[string]int // channel -> lock key -> entries
	runs    map[string]*handoffRun    // by lock key
}

func newCohort() *cohort {
	return &cohort{entries: map[string][]*waitEntry{}, byChan: map[string]map[string]int{}, runs: map[string]*handoffRun{}}
}

// waitEntry is one waiting goroutine that can be handed the lock. Its fields
// are guarded by the cohort's lock.
type waitEntry struct {
	acc     *acceptor
	channel string
	wake    func()          // wakes the waiter, without blocking
	woken   <-chan struct{} // where the waiter is woken
	idle    bool            // waiting, not trying: it may be handed the lock
	h       *handoff        // the handoff it is reserved for
}

// handoff is a lock being handed to one waiter. Its state is guarded by
// the cohort's lock.
type handoff struct {
	e       *waitEntry
	acc     *acceptor   // the waiter's
	field   string      // the waiter's owner when claimed
	release call        // from acc, set by the releaser
	st      lease.Stamp // of the releaser's script

	bounded bool // the run's bound is reached: release for other clients
	granted bool
	reply   []int64       // the script's reply when granted
	next    time.Duration // when not granted: how long to wait at most
	err     error         // the outcome is unknown

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

// blocking returns the acceptor of a waiter of lock key that takes no
// handoffs (a MultiLock of the name): in line with those that do, it keeps
// the lock from being handed past it, so that a MultiLock waiting in a
// Client whose goroutines hand the lock to each other still gets its turn.
func blocking(key string) *acceptor { return &acceptor{key: key} }

// join registers a waiter on channel that can be handed the lock acc
// names; wake wakes it without blocking, on woken. The entry must be left
// with leave.
func (co *cohort) join(channel string, acc *acceptor, wake func(), woken <-chan struct{}) *waitEntry {
	e := &waitEntry{acc: acc, channel: channel, wake: wake, woken: woken}
	co.mu.Lock()
	defer co.mu.Unlock()
	co.entries[acc.key] = append(co.entries[acc.key], e)
	keys := co.byChan[channel]
	if keys == nil {
		keys = map[string]int{}
		co.byChan[channel] = keys
	}
	keys[acc.key]++
	return e
}

// leave removes e. It returns a handoff that was delivered to e and not
// taken, for the caller to give back; one still under way is marked
// abandoned, for its releaser to give back.
func (co *cohort) leave(e *waitEntry) (untaken *handoff) {
	co.mu.Lock()
	defer co.mu.Unlock()
	key := e.acc.key
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
func (co *cohort) endRun(key string) {
	if r := co.runs[key]; r != nil && !time.Now().Before(r.yieldUntil) {
		delete(co.runs, key)
	} else if r != nil {
		r.n = 0
	}
}

// claim picks the first waiter of lock key that can be handed the lock
// now (it takes handoffs and is waiting, not trying), and reserves it: the
// waiter does not try again until the outcome is settled. It returns nil
// when there is none, or when a waiter that takes no handoffs (see
// blocking) comes before it. confirmed says this client's subscription to the
// lock's channel is confirmed: mine is then 1, the subscriptions of this
// client Redis counts on it.
func (co *cohort) claim(key string, confirmed bool) (h *handoff, mine int) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, e := range co.entries[key] {
		if e.acc.take == nil {
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
		e.h = &handoff{e: e, acc: e.acc, field: e.acc.field(),
			bounded: r.n > cohortRun || time.Since(r.start) >= cohortTime}
		r.releasing = e.h.bounded
		if confirmed {
			mine = 1
		}
		return e.h, mine
	}
	co.endRun(key)
	return nil, 0
}

// settle records the reply of h's script (see lua/handoff.lua) and wakes
// h's waiter. It returns false when the waiter has left meanwhile: the
// caller gives back what the script may have granted (giveBackHandoff).
func (co *cohort) settle(h *handoff, r []int64, err error) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	key := h.acc.key
	if run := co.runs[key]; run != nil {
		run.releasing = false
	}
	switch {
	case err != nil:
		h.err = err
	case r[0] == 1:
		h.granted, h.reply = true, r
	case r[0] == 2:
		h.next = cohortYield
		run := co.runs[key]
		if run == nil {
			run = &handoffRun{}
			co.runs[key] = run
		}
		run.yieldUntil = time.Now().Add(cohortYield)
		time.AfterFunc(cohortYield, func() {
			co.mu.Lock()
			defer co.mu.Unlock()
			if co.runs[key] == run && run.n == 0 {
				co.endRun(key)
			}
		})
	default:
		h.next = bound(r[1], h.acc.lease/3)
	}
	if !h.granted || h.bounded {
		co.endRun(key) // a new run starts
	}
	if h.abandoned {
		return false
	}
	h.delivered = true
	h.e.wake()
	return true
}

// yielding reports until when this client's waiter with acc holds back
// before it tries (never when acc is nil: it cannot be handed the lock).
func (co *cohort) yielding(acc *acceptor, now time.Time) (time.Time, bool) {
	if acc == nil {
		return time.Time{}, false
	}
	return co.keyYielding(acc.key, now)
}

// keyYielding reports until when this client's callers of lock key hold
// back, after a run of handoffs ended with the lock released for other
// clients.
func (co *cohort) keyYielding(key string, now time.Time) (time.Time, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.yieldingLocked(key, now)
}

func (co *cohort) yieldingLocked(key string, now time.Time) (time.Time, bool) {
	switch r := co.runs[key]; {
	case r == nil:
	case r.releasing:
		return now.Add(cohortYield), true // at least: see handoffRun
	case now.Before(r.yieldUntil):
		return r.yieldUntil, true
	}
	return time.Time{}, false
}

// chanYielding is yielding for the locks whose waiters wait on channel:
// the subscription holds its wake-ups back until then.
func (co *cohort) chanYielding(channel string, now time.Time) (time.Time, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for key := range co.byChan[channel] {
		if y, ok := co.yieldingLocked(key, now); ok {
			return y, true
		}
	}
	return time.Time{}, false
}

// setIdle marks e as waiting (it may be handed the lock) or as trying, and
// returns the handoff e is reserved for, if any.
func (co *cohort) setIdle(e *waitEntry, idle bool) (claimed *handoff) {
	co.mu.Lock()
	defer co.mu.Unlock()
	e.idle = idle
	return e.h
}

// handed waits for the outcome of the handoff e was reserved for and
// consumes it; it returns ctx's error if ctx ends first (leave then
// settles the handoff), and ErrClosed once closed is.
func (co *cohort) handed(ctx context.Context, e *waitEntry, closed <-chan struct{}) (*handoff, error) {
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
			return nil, ErrClosed
		}
	}
}

// errHandoffLeft is a handoff's outcome when its releaser left before the
// reply (a release is bounded by releaseTimeout): the script may still
// run, and what it grants is given back then, so the receiver must not
// adopt it; it waits on as a new owner.
var errHandoffLeft = errors.New("redisync: the releaser left before the handoff's reply")

// giveBackHandoff gives back what a handoff nobody took may have granted:
// at once when it was granted, by a sweep when its outcome is unknown.
func (c *Client) giveBackHandoff(h *handoff) {
	switch {
	case errors.Is(h.err, ErrNotReplicated):
		// given back already
	case h.err != nil:
		c.sweep(h.acc.lease, h.release)
	case h.granted:
		if !c.bgStart() {
			c.undo(h.release) // closing: no background work
			return
		}
		go func() {
			defer c.bg.Done()
			c.undo(h.release)
		}()
	}
}

// subCounter names how lua/handoff.lua counts the subscribers of a channel
// published with pub: on the lock's node for sharded pub/sub and on a
// single node; not at all ("any": others are assumed to wait) for classic
// pub/sub on a Cluster, whose subscribers may be on any node.
func (c *Client) subCounter(pub string) string {
	switch {
	case pub == "spublish":
		return "shardnumsub"
	case isCluster(c.rdb):
		return "any"
	}
	return "numsub"
}
