package redisync

import (
	"context"
	"errors"
	"time"
)

// Cohort handoff: a Mutex whose last hold is released while another
// goroutine of this Client waits for it is handed to that waiter by one
// script (lua/handoff.lua), instead of being freed, announced to every
// client and raced for. The lock is never free in between, so to every
// other client, Redisson included, it just has a new holder.
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
	fence   string                  // the fencing counter's key, or "" (WithFencing)
	field   func() string           // the waiter's owner
	release func(field string) call // gives a handed lock back
	// take makes the hold from a delivered handoff, as an attempt would.
	take func(h *handoff) (done bool, next time.Duration, err error)
}

// handoff is a lock being handed to one waiter. Its state is guarded by
// the pubsub's lock.
type handoff struct {
	w       *waiter
	acc     *acceptor // the waiter's
	field   string    // the waiter's owner when claimed
	release call      // from acc, set by the releaser outside p.mu
	st      stamp     // of the releaser's script

	bounded bool // the run's bound is reached: release for other clients
	granted bool
	reply   []int64       // the script's reply when granted
	next    time.Duration // when not granted: how long to wait at most
	err     error         // the outcome is unknown

	delivered bool // the outcome is in; the waiter is woken
	abandoned bool // the waiter left before the outcome came: give it back
}

// handoffRun is one lock's run of local handoffs in this client. It is kept
// by lock key, not on the channel: a channel's local state goes when its
// last waiter leaves, which a run of handoffs between two goroutines does
// every time; and two names may share a channel. It lives while the run
// does, and then as long as the client's waiters yield.
type handoffRun struct {
	n          int       // handoffs in a row
	start      time.Time // when the run's first was claimed
	yieldUntil time.Time // this client's waiters hold back until then
}

// endRun ends key's run: the lock was released, not handed over. Called
// with p.mu held.
func (p *pubsub) endRun(key string) {
	if r := p.runs[key]; r != nil && !time.Now().Before(r.yieldUntil) {
		delete(p.runs, key)
	} else if r != nil {
		r.n = 0
	}
}

// claim picks the first waiter of lock key on channel name that can be
// handed the lock now (it takes handoffs and is waiting, not trying), and
// reserves it: the waiter does not try again until the outcome is settled.
// It returns nil when there is none. mine is how many subscriptions of this
// client Redis counts on the channel now (0 or 1).
func (p *pubsub) claim(name, key string) (h *handoff, mine int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		p.endRun(key)
		return nil, 0
	}
	for _, w := range ch.waiters {
		if w.acc == nil || w.acc.key != key || !w.idle || w.h != nil {
			continue
		}
		r := p.runs[key]
		if r == nil {
			r = &handoffRun{}
			p.runs[key] = r
		}
		if r.n == 0 {
			r.start = time.Now()
		}
		r.n++
		w.h = &handoff{w: w, acc: w.acc, field: w.acc.field(),
			bounded: r.n > cohortRun || time.Since(r.start) >= cohortTime}
		if p.confirmed(ch) {
			mine = 1
		}
		return w.h, mine
	}
	p.endRun(key)
	return nil, 0
}

// settle records the reply of h's script (see lua/handoff.lua) and wakes
// h's waiter. It returns false when the waiter has left meanwhile: the
// caller gives back what the script may have granted (giveBackHandoff).
func (p *pubsub) settle(h *handoff, r []int64, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := h.acc.key
	switch {
	case err != nil:
		h.err = err
	case r[0] == 1:
		h.granted, h.reply = true, r
	case r[0] == 2:
		h.next = cohortYield
		run := p.runs[key]
		if run == nil {
			run = &handoffRun{}
			p.runs[key] = run
		}
		run.yieldUntil = time.Now().Add(cohortYield)
		time.AfterFunc(cohortYield, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.runs[key] == run && run.n == 0 {
				p.endRun(key)
			}
		})
	default:
		h.next = bound(r[1], h.acc.lease/3)
	}
	if !h.granted || h.bounded {
		p.endRun(key) // a new run starts
	}
	if h.abandoned {
		return false
	}
	h.delivered = true
	wake([]*waiter{h.w}, 1)
	return true
}

// yielding reports until when this client's callers of lock key hold back,
// after a run of handoffs ended with the lock released for other clients.
// Called with p.mu held.
func (p *pubsub) yielding(key string, now time.Time) (time.Time, bool) {
	if r := p.runs[key]; r != nil && now.Before(r.yieldUntil) {
		return r.yieldUntil, true
	}
	return time.Time{}, false
}

// yielding is pubsub.yielding for w's lock: until when w holds back
// before it tries (never when it cannot be handed the lock).
func (w *waiter) yielding() (time.Time, bool) {
	if w.acc == nil {
		return time.Time{}, false
	}
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.yielding(w.acc.key, time.Now())
}

// chanYielding is yielding for the locks whose waiters wait on ch. Called
// with p.mu held.
func (p *pubsub) chanYielding(ch *channel, now time.Time) (time.Time, bool) {
	for _, w := range ch.waiters {
		if w.acc != nil {
			if y, ok := p.yielding(w.acc.key, now); ok {
				return y, true
			}
		}
	}
	return time.Time{}, false
}

// setIdle marks w as waiting (it may be handed the lock) or as trying, and
// returns the handoff w is reserved for, if any.
func (w *waiter) setIdle(idle bool) (claimed *handoff) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.idle = idle
	return w.h
}

// handed waits for the outcome of the handoff w was reserved for and
// consumes it; it returns ctx's error if ctx ends first (leave then
// settles the handoff).
func (w *waiter) handed(ctx context.Context) (*handoff, error) {
	for {
		w.p.mu.Lock()
		h := w.h
		if h.delivered {
			w.h = nil
			w.p.mu.Unlock()
			return h, nil
		}
		w.p.mu.Unlock()
		select {
		case <-w.c:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.p.closed:
			return nil, ErrClosed
		}
	}
}

// dropHandoff settles, when w leaves, a handoff it had not consumed: a
// pending one is marked abandoned (its releaser gives the lock back), a
// delivered one is returned for the caller to give back. Called with p.mu
// held.
func (w *waiter) dropHandoff() *handoff {
	h := w.h
	w.h = nil
	if h == nil {
		return nil
	}
	if !h.delivered {
		h.abandoned = true
		return nil
	}
	return h
}

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

// waitIdle is wait during which w may be handed the lock.
func (w *waiter) waitIdle(ctx context.Context, d time.Duration) (bool, error) {
	if w.acc != nil {
		w.setIdle(true)
	}
	return w.wait(ctx, d)
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
