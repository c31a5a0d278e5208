package notify

import (
	"context"
	"slices"
	"time"
)

// Mark is a channel's state seen before an attempt: see Hub.Mark.
type Mark struct {
	ch  *channel
	seq uint64
}

// Waiter is one goroutine waiting on a channel.
type Waiter struct {
	p  *Hub
	ch *channel
	c  chan struct{} // buffered 1: a wake-up not yet taken

	// A watcher's messages not yet taken, and whether some may have been
	// missed (a re-subscription, or more messages than it keeps); guarded
	// by p.mu.
	watcher bool
	msgs    []string
	lost    bool
}

// watchBacklog bounds the messages a watcher keeps untaken: beyond it
// they are dropped, and the watcher told it missed some.
const watchBacklog = 256

// Wake policies for Subscribe: one waiter per message, or all.
func WakeOne(string) int { return 1 }

func WakeAll(string) int { return -1 }

// Take returns the messages w, a watcher, has been told since it last
// took them, and whether it may have missed some meanwhile.
func (w *Waiter) Take() (msgs []string, missed bool) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	msgs, missed = w.msgs, w.lost
	w.msgs, w.lost = nil, false
	return msgs, missed
}

// tell gives the watchers of ch a message (or, with resub, the news that
// ch has just been subscribed, again) and wakes them. Called with p.mu
// held.
func tell(ch *channel, payload string, resub bool) {
	for _, w := range ch.watchers {
		switch {
		case resub:
			w.lost = true
		case len(w.msgs) >= watchBacklog:
			w.msgs, w.lost = nil, true
		default:
			w.msgs = append(w.msgs, payload)
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}

// Mark records the state of a channel that is already subscribed and
// confirmed, before an attempt at what it guards. If nothing was delivered
// on it from then until a waiter registers, the waiter cannot have missed a
// wake-up, and need not try again before waiting (see Waiter.Missed).
//
// queued reports whether local waiters are already waiting on the channel,
// and until when the lock's holder keeps it at most without renewing, as
// the latest attempt saw.
func (p *Hub) Mark(name string) (m Mark, queued bool, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return Mark{}, false, time.Time{}
	}
	queued, until = len(ch.waiters) > 0, ch.until
	if !p.confirmed(ch) {
		return Mark{}, queued, until
	}
	select {
	case <-ch.ready:
		return Mark{ch: ch, seq: ch.seq}, queued, until
	default:
		return Mark{}, queued, until
	}
}

// Missed reports whether w could have missed a wake-up since m was taken:
// always, unless m saw w's channel live and nothing was delivered since.
func (w *Waiter) Missed(m Mark) bool {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return m.ch != w.ch || m.seq != w.ch.seq
}

// Note records that an attempt found the lock held for at most d more.
func (w *Waiter) Note(d time.Duration) {
	w.p.mu.Lock()
	w.ch.until = time.Now().Add(d)
	w.p.mu.Unlock()
}

// rotateEvery is how many times in a row a client's waiters may win a lock
// before the client moves to the back of its channel's subscribers: each
// move costs Redis an UNSUBSCRIBE and a SUBSCRIBE, and a few wins in a row
// do not upset the turns (measured: 8% more handoffs/s, 10% less Redis CPU
// per handoff than moving after every win, Jain's index still above 0.99).
const rotateEvery = 4

// Rotate records a win by one of this client's waiters and, every
// rotateEvery wins while it has other local waiters, moves the client to the
// back of the channel's subscribers. Redis delivers a message to a channel's
// subscribers in the order they subscribed (sharded channels too), and the
// first client to hear an unlock usually wins the race for the lock; a
// client that keeps winning goes last, so the clients take turns and none
// starves.
//
// An unlock published between the UNSUBSCRIBE and the SUBSCRIBE is not
// heard; the waiters look again once the SUBSCRIBE is confirmed.
func (p *Hub) Rotate(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil || len(ch.waiters) == 0 || !p.confirmed(ch) {
		return
	}
	if ch.wins++; ch.wins < rotateEvery {
		return
	}
	ch.wins = 0
	p.queueUnsub(ch.conn, name)
	p.queueSub(ch.conn, name)
}

// leave removes w from its channel, passing on a wake-up it did not take and
// unsubscribing the channel when w was its last local waiter.
func (p *Hub) leave(w *Waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := w.ch
	if w.watcher {
		ch.watchers = slices.DeleteFunc(ch.watchers, func(x *Waiter) bool { return x == w })
	} else {
		for i, x := range ch.waiters {
			if x == w {
				ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
				break
			}
		}
		select {
		case <-w.c:
			wake(ch.waiters, 1)
		default:
		}
	}
	if len(ch.waiters) > 0 || len(ch.watchers) > 0 || p.chans[ch.name] != ch {
		return
	}
	delete(p.chans, ch.name)
	ch.routing = false
	if ch.conn != nil {
		p.queueUnsub(ch.conn, ch.name)
	}
	if len(p.chans) == 0 {
		p.unwatched()
	}
}

// Ready waits for Redis to confirm the subscription, at most d: until then an
// unlock could be published before Redis delivers it to this client.
func (w *Waiter) Ready(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.ch.ready:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.p.closed:
		return w.p.closedErr
	}
}

// Wait blocks until w is woken (woken is true), d has passed, ctx ends (its
// error) or the Hub closes (Config.ClosedErr).
func (w *Waiter) Wait(ctx context.Context, d time.Duration) (woken bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.c:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-w.p.closed:
		return false, w.p.closedErr
	}
}

// PassOn wakes the first waiter queued behind w that has no wake-up pending:
// w was woken for something it could not use, which one behind it may.
func (w *Waiter) PassOn() {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range w.ch.waiters {
		if x == w {
			wake(w.ch.waiters[i+1:], 1)
			return
		}
	}
}

// Nudge wakes one local waiter of channel name, if it has any: a waiter
// that was woken on it left for another channel without using the
// wake-up (a MultiLock found another of its names held).
func (p *Hub) Nudge(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch := p.chans[name]; ch != nil {
		wake(ch.waiters, 1)
	}
}

// Leave ends the wait; see Hub.leave.
func (w *Waiter) Leave() { w.p.leave(w) }

// Woken is where w is woken: a value on it is a wake-up that Wait has not
// taken yet. Whoever takes one there must act on it, or hand it back
// with WakeNow.
func (w *Waiter) Woken() <-chan struct{} { return w.c }

// WakeNow wakes w, without blocking.
func (w *Waiter) WakeNow() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// ConfirmedOn reports whether channel name is subscribed, as its
// connection's replies say.
func (p *Hub) ConfirmedOn(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	return ch != nil && p.confirmed(ch)
}

// wake wakes up to n of ws (all when n < 0), in order, skipping those that
// already have a wake-up pending. Called with p.mu held.
func wake(ws []*Waiter, n int) {
	for _, w := range ws {
		if n == 0 {
			return
		}
		select {
		case w.c <- struct{}{}:
			n--
		default:
		}
	}
}

func (p *Hub) deliver(name, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return
	}
	ch.seq++
	tell(ch, payload, false)
	if y, ok := p.hold(ch.name, time.Now()); ok {
		// Other clients' turn (Config.Hold): wake when the hold ends.
		if !ch.deferred {
			ch.deferred = true
			time.AfterFunc(time.Until(y), func() { p.wakeDeferred(ch, payload) })
		}
		return
	}
	wake(ch.waiters, ch.wake(payload))
}

// wakeDeferred delivers a wake-up held back while ch's waiters yielded.
func (p *Hub) wakeDeferred(ch *channel, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch.deferred = false
	if p.chans[ch.name] == ch {
		ch.seq++
		wake(ch.waiters, ch.wake(payload))
	}
}
