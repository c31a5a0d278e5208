package redisync

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsub is a Client's one subscription to Redis. Waiters of every lock share
// it: a channel is subscribed while at least one local waiter needs it, and a
// message wakes as many local waiters of that channel as its policy says.
//
// Messages can be lost (a reconnect, a killed subscription), so no wait relies
// on them alone: every wait also has a bound, and after go-redis re-subscribes
// on a new connection every waiter of every channel is woken to look again.
type pubsub struct {
	rdb    redis.UniversalClient
	closed <-chan struct{}

	mu    sync.Mutex
	ps    *redis.PubSub // nil until the first subscription
	chans map[string]*channel
	stale map[string]int // acks still due for subscriptions already dropped
	done  chan struct{}  // closed when the reader goroutine has ended
}

// channel is the local state of one subscribed channel.
type channel struct {
	name    string
	wake    func(payload string) int // waiters to wake per message; < 0 for all
	waiters []*waiter                // in arrival order
	pending int                      // SUBSCRIBE acks not yet received
	rotated int                      // of which from rotate: the channel stays live
	wins    int                      // local waiters that won since the last rotation
	ready   chan struct{}            // closed at the first ack (of any)
	seq     uint64                   // wake-ups so far (messages and re-subscriptions)
}

// mark is a channel's state seen before an attempt: see pubsub.mark.
type mark struct {
	ch  *channel
	seq uint64
}

// waiter is one goroutine waiting on a channel.
type waiter struct {
	p  *pubsub
	ch *channel
	c  chan struct{} // buffered 1: a wake-up not yet taken
}

func newPubSub(rdb redis.UniversalClient, closed <-chan struct{}) *pubsub {
	return &pubsub{rdb: rdb, closed: closed, chans: map[string]*channel{}, stale: map[string]int{}}
}

// Wake policies for subscribe.
func wakeOne(string) int { return 1 }
func wakeAll(string) int { return -1 }

// subscribe registers a waiter on name, subscribing the channel if it is the
// first local waiter. wake decides how many waiters a message wakes; the first
// subscriber of a channel sets it. The waiter must be left with leave. It
// fails only when the client is closed.
func (p *pubsub) subscribe(ctx context.Context, name string, wake func(string) int) (*waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return nil, ErrClosed
	default:
	}
	ch := p.chans[name]
	if ch == nil {
		ch = &channel{name: name, wake: wake, ready: make(chan struct{}), pending: 1}
		p.chans[name] = ch
		// A failed send leaves the channel in go-redis's set, which it
		// re-subscribes when its reader reconnects; until then the
		// waiter's bounded waits stand in for the messages.
		p.send(ctx, name)
	}
	w := &waiter{p: p, ch: ch, c: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	return w, nil
}

// mark records the state of a channel that is already subscribed and
// confirmed, before an attempt at what it guards. If nothing was delivered
// on it from then until a waiter registers, the waiter cannot have missed a
// wake-up, and need not try again before waiting (see waiter.missed).
//
// queued reports whether local waiters are already waiting on the channel.
func (p *pubsub) mark(name string) (m mark, queued bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil || ch.pending > ch.rotated {
		return mark{}, false
	}
	return mark{ch: ch, seq: ch.seq}, len(ch.waiters) > 0
}

// missed reports whether w could have missed a wake-up since m was taken:
// always, unless m saw w's channel live and nothing was delivered since.
func (w *waiter) missed(m mark) bool {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return m.ch != w.ch || m.seq != w.ch.seq
}

// rotateEvery is how many times in a row a client's waiters may win a lock
// before the client moves to the back of its channel's subscribers: each
// move costs Redis an UNSUBSCRIBE and a SUBSCRIBE, and a few wins in a row
// do not upset the turns (measured: 8% more handoffs/s, 10% less Redis CPU
// per handoff than moving after every win, Jain's index still above 0.99).
const rotateEvery = 4

// rotate records a win by one of this client's waiters and, every
// rotateEvery wins while it has other local waiters, moves the client to the
// back of the channel's subscribers. Redis delivers a message to a channel's
// subscribers in the order they subscribed, and the first client to hear an
// unlock usually wins the race for the lock; a client that keeps winning
// goes last, so the clients take turns and none starves.
//
// The caller holds the lock the channel announces: no unlock message can be
// published between the UNSUBSCRIBE and the SUBSCRIBE.
func (p *pubsub) rotate(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil || len(ch.waiters) == 0 || ch.pending > ch.rotated || p.ps == nil {
		return
	}
	if ch.wins++; ch.wins < rotateEvery {
		return
	}
	ch.wins = 0
	// Errors are left to go-redis: Subscribe puts the channel back in its
	// set even when the connection is gone, and a reconnect re-subscribes
	// it, so the ack counted here comes either way.
	ctx := context.Background()
	_ = p.ps.Unsubscribe(ctx, name)
	ch.pending++
	ch.rotated++
	_ = p.ps.Subscribe(ctx, name)
}

// send writes SUBSCRIBE name on the shared connection, creating it and its
// reader goroutine on first use. Called with p.mu held, which keeps the
// SUBSCRIBE and UNSUBSCRIBE commands in the order of the state changes.
func (p *pubsub) send(ctx context.Context, name string) {
	ctx = context.WithoutCancel(ctx)
	if p.ps == nil {
		p.ps = p.rdb.Subscribe(ctx)
		p.done = make(chan struct{})
		go p.read(p.ps, p.done)
	}
	_ = p.ps.Subscribe(ctx, name)
}

// leave removes w from its channel, passing on a wake-up it did not take and
// unsubscribing the channel when w was its last local waiter.
func (p *pubsub) leave(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := w.ch
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
	if len(ch.waiters) > 0 || p.chans[ch.name] != ch {
		return
	}
	delete(p.chans, ch.name)
	if ch.pending > 0 {
		p.stale[ch.name] += ch.pending
	}
	if p.ps != nil {
		// An error means the connection is gone; go-redis will not
		// re-subscribe the channel, which is all that is needed.
		_ = p.ps.Unsubscribe(context.Background(), ch.name)
	}
}

// ready waits for Redis to confirm the subscription, at most d: until then an
// unlock could be published before Redis delivers it to this client.
func (w *waiter) ready(ctx context.Context, d time.Duration) error {
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
		return ErrClosed
	}
}

// wait blocks until w is woken (woken is true), d has passed, ctx ends (its
// error) or the client closes (ErrClosed).
func (w *waiter) wait(ctx context.Context, d time.Duration) (woken bool, err error) {
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
		return false, ErrClosed
	}
}

// passOn wakes the first waiter queued behind w that has no wake-up pending:
// w was woken for something it could not use, which one behind it may.
func (w *waiter) passOn() {
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

// leave ends the wait; see pubsub.leave.
func (w *waiter) leave() { w.p.leave(w) }

// wake wakes up to n of ws (all when n < 0), in order, skipping those that
// already have a wake-up pending. Called with p.mu held.
func wake(ws []*waiter, n int) {
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

// read is the reader goroutine: it dispatches messages and acks until the
// PubSub is closed. go-redis reconnects and re-subscribes by itself after a
// connection error; read only paces its retries.
func (p *pubsub) read(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			p.connLost()
			select {
			case <-p.closed:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			p.deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				p.ack(m.Channel)
			}
		}
	}
}

// connLost forgets the acks the lost connection still owed: they will not
// come, and go-redis confirms the channels it re-subscribes afresh.
func (p *pubsub) connLost() {
	p.mu.Lock()
	clear(p.stale)
	p.mu.Unlock()
}

func (p *pubsub) deliver(name, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch := p.chans[name]; ch != nil {
		ch.seq++
		wake(ch.waiters, ch.wake(payload))
	}
}

// ack counts a subscription confirmation. One that no SUBSCRIBE of ours is
// waiting for comes from go-redis re-subscribing on a new connection: messages
// may have been lost meanwhile, so every waiter of the channel looks again.
func (p *pubsub) ack(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.stale[name]; n > 0 {
		if n == 1 {
			delete(p.stale, name)
		} else {
			p.stale[name] = n - 1
		}
		return
	}
	ch := p.chans[name]
	if ch == nil {
		return
	}
	if ch.pending > 0 {
		ch.pending--
		ch.rotated = max(ch.rotated-1, 0)
		select {
		case <-ch.ready:
		default:
			close(ch.ready)
		}
		return
	}
	ch.seq++
	wake(ch.waiters, -1)
}

// close ends the subscription and waits for the reader goroutine.
func (p *pubsub) close() {
	p.mu.Lock()
	ps, done := p.ps, p.done
	p.ps = nil
	p.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}
