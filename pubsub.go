package redisync

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsub is a Client's one subscription to Redis. Waiters of every lock share
// it: a channel is subscribed while at least one local waiter needs it, and a
// message wakes as many local waiters of that channel as its policy says.
//
// What Redis has subscribed is read from its own replies, never assumed from
// what was sent: a SUBSCRIBE counts once Redis confirmed it, one whose write
// failed or whose confirmation does not come is sent again until it is, and
// a lost connection unconfirms every channel until go-redis's reconnection
// has subscribed it afresh. Whenever a channel becomes subscribed again
// while waiters wait on it (a reconnection, a rotation), a message may have
// been missed meanwhile, so its waiters look again. Messages can still be
// lost, so no wait relies on them alone: every wait also has a bound.
//
// Commands are written by one writer goroutine, in the order of the state
// changes that queue them, so no waiter ever blocks on the network to
// subscribe or to leave.
type pubsub struct {
	rdb    redis.UniversalClient
	closed <-chan struct{}
	log    *slog.Logger

	mu      sync.Mutex
	ps      *redis.PubSub        // nil until the first subscription
	chans   map[string]*channel  // channels with local waiters
	subs    map[string]*subState // what Redis's replies say of each channel
	ops     []subOp              // to write, in order
	kick    chan struct{}        // buffered 1: ops are queued
	retry   *time.Timer          // re-sends unconfirmed subscriptions
	armed   bool                 // retry is pending
	stopped bool
	wg      sync.WaitGroup // the reader and the writer
}

// subOp is a SUBSCRIBE (sub) or UNSUBSCRIBE to write.
type subOp struct {
	sub  bool
	name string
}

// subState is a channel's state on the connection, as its replies tell it.
type subState struct {
	live   bool      // the newest reply about it confirmed a subscription
	unsubs int       // UNSUBSCRIBEs queued and not yet confirmed
	sent   time.Time // when the newest SUBSCRIBE was queued
}

// confirmed reports whether Redis delivers the channel's messages to this
// client now and will until told otherwise.
func (s *subState) confirmed() bool { return s.live && s.unsubs == 0 }

// resendAfter is how long a SUBSCRIBE may go unconfirmed before it is sent
// again.
const resendAfter = time.Second

// channel is the local state of one subscribed channel.
type channel struct {
	name       string
	wake       func(payload string) int // waiters to wake per message; < 0 for all
	waiters    []*waiter                // in arrival order
	wins       int                      // local waiters that won since the last rotation
	ready      chan struct{}            // closed at the channel's first confirmation
	seq        uint64                   // wake-ups so far (messages and re-subscriptions)
	until      time.Time                // when the holder's lease runs out, as last seen
	run        int                      // local handoffs in a row (cohort.go)
	runStart   time.Time                // when the run's first was claimed
	yieldUntil time.Time                // waiters hold back until then (cohort.go)
	deferred   bool                     // a wake-up is due when the yield ends
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

	// Cohort handoff (cohort.go), guarded by p.mu.
	acc  *acceptor // nil: the waiter cannot be handed the lock
	idle bool      // waiting, not trying: it may be handed the lock
	h    *handoff  // the handoff it is reserved for
}

func newPubSub(rdb redis.UniversalClient, closed <-chan struct{}, log *slog.Logger) *pubsub {
	return &pubsub{
		rdb: rdb, closed: closed, log: log,
		chans: map[string]*channel{}, subs: map[string]*subState{},
		kick: make(chan struct{}, 1),
	}
}

// Wake policies for subscribe.
func wakeOne(string) int { return 1 }
func wakeAll(string) int { return -1 }

// subscribe registers a waiter on name, subscribing the channel if it is the
// first local waiter. wake decides how many waiters a message wakes; the first
// subscriber of a channel sets it. The waiter must be left with leave. It
// fails only when the client is closed.
func (p *pubsub) subscribe(name string, wake func(string) int, acc *acceptor) (*waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return nil, ErrClosed
	default:
	}
	ch := p.chans[name]
	if ch == nil {
		ch = &channel{name: name, wake: wake, ready: make(chan struct{})}
		p.chans[name] = ch
		if p.state(name).confirmed() {
			close(ch.ready)
		} else {
			p.queueSub(name)
		}
	}
	w := &waiter{p: p, ch: ch, c: make(chan struct{}, 1), acc: acc}
	ch.waiters = append(ch.waiters, w)
	return w, nil
}

// state returns name's subscription state, creating it. Called with p.mu held.
func (p *pubsub) state(name string) *subState {
	s := p.subs[name]
	if s == nil {
		s = &subState{}
		p.subs[name] = s
	}
	return s
}

// queueSub queues a SUBSCRIBE of name and makes sure it is sent again if
// it goes unconfirmed. Called with p.mu held.
func (p *pubsub) queueSub(name string) {
	p.state(name).sent = time.Now()
	p.queue(subOp{sub: true, name: name})
	p.armRetry()
}

// queueUnsub queues an UNSUBSCRIBE of name. Called with p.mu held.
func (p *pubsub) queueUnsub(name string) {
	p.state(name).unsubs++
	p.queue(subOp{name: name})
}

// queue hands op to the writer, starting the subscription (its connection,
// reader and writer) on first use. Called with p.mu held.
func (p *pubsub) queue(op subOp) {
	if p.stopped {
		return
	}
	if p.ps == nil {
		p.ps = p.rdb.Subscribe(context.Background())
		p.wg.Add(2)
		go p.read(p.ps)
		go p.write(p.ps)
	}
	p.ops = append(p.ops, op)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// armRetry schedules a look for unconfirmed subscriptions. Called with p.mu held.
func (p *pubsub) armRetry() {
	if p.armed || p.stopped {
		return
	}
	p.armed = true
	if p.retry == nil {
		p.retry = time.AfterFunc(resendAfter, p.resend)
	} else {
		p.retry.Reset(resendAfter)
	}
}

// resend sends again every SUBSCRIBE that has gone unconfirmed for
// resendAfter: its write may have failed after go-redis recorded the
// channel, and a reconnection within that write re-subscribes only the
// channels it had before.
func (p *pubsub) resend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	pending := false
	for name := range p.chans {
		s := p.state(name)
		if s.confirmed() {
			continue
		}
		pending = true
		if time.Since(s.sent) >= resendAfter {
			p.log.Warn("redisync: subscription not confirmed; sending it again", "channel", name)
			p.queueSub(name)
		}
	}
	if pending {
		p.armRetry()
	}
}

// write is the writer goroutine: it writes the queued commands in order
// until the client closes.
func (p *pubsub) write(ps *redis.PubSub) {
	defer p.wg.Done()
	ctx := context.Background()
	for {
		select {
		case <-p.kick:
		case <-p.closed:
			return
		}
		for {
			p.mu.Lock()
			if len(p.ops) == 0 || p.stopped {
				p.mu.Unlock()
				break
			}
			op := p.ops[0]
			p.ops = p.ops[1:]
			p.mu.Unlock()
			if op.sub {
				// A failed write may have made go-redis reconnect and
				// re-subscribe its channels without this one: write it
				// again at once (the retry timer covers the rest).
				if ps.Subscribe(ctx, op.name) != nil {
					_ = ps.Subscribe(ctx, op.name)
				}
				continue
			}
			if ps.Unsubscribe(ctx, op.name) != nil {
				// No confirmation will come: the connection is gone,
				// and go-redis does not re-subscribe the channel.
				p.mu.Lock()
				if s := p.subs[op.name]; s != nil && s.unsubs > 0 {
					s.unsubs--
				}
				p.mu.Unlock()
			}
		}
	}
}

// mark records the state of a channel that is already subscribed and
// confirmed, before an attempt at what it guards. If nothing was delivered
// on it from then until a waiter registers, the waiter cannot have missed a
// wake-up, and need not try again before waiting (see waiter.missed).
//
// queued reports whether local waiters are already waiting on the channel,
// and until when the lock's holder keeps it at most without renewing, as
// the latest attempt saw.
func (p *pubsub) mark(name string) (m mark, queued bool, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return mark{}, false, time.Time{}
	}
	queued, until = len(ch.waiters) > 0, ch.until
	if y, ok := ch.yielding(time.Now()); ok {
		queued, until = true, y
	}
	if !p.state(name).confirmed() {
		return mark{}, queued, until
	}
	select {
	case <-ch.ready:
		return mark{ch: ch, seq: ch.seq}, queued, until
	default:
		return mark{}, queued, until
	}
}

// missed reports whether w could have missed a wake-up since m was taken:
// always, unless m saw w's channel live and nothing was delivered since.
func (w *waiter) missed(m mark) bool {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return m.ch != w.ch || m.seq != w.ch.seq
}

// note records that an attempt found the lock held for at most d more.
func (w *waiter) note(d time.Duration) {
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

// rotate records a win by one of this client's waiters and, every
// rotateEvery wins while it has other local waiters, moves the client to the
// back of the channel's subscribers. Redis delivers a message to a channel's
// subscribers in the order they subscribed, and the first client to hear an
// unlock usually wins the race for the lock; a client that keeps winning
// goes last, so the clients take turns and none starves.
//
// An unlock published between the UNSUBSCRIBE and the SUBSCRIBE is not
// heard; the waiters look again once the SUBSCRIBE is confirmed.
func (p *pubsub) rotate(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil || len(ch.waiters) == 0 || !p.state(name).confirmed() {
		return
	}
	if ch.wins++; ch.wins < rotateEvery {
		return
	}
	ch.wins = 0
	p.queueUnsub(name)
	p.queueSub(name)
}

// leave removes w from its channel, passing on a wake-up it did not take and
// unsubscribing the channel when w was its last local waiter. It returns a
// handoff that was delivered to w and not taken: the caller gives it back.
func (p *pubsub) leave(w *waiter) (untaken *handoff) {
	p.mu.Lock()
	defer p.mu.Unlock()
	untaken = w.dropHandoff()
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
		return untaken
	}
	delete(p.chans, ch.name)
	p.queueUnsub(ch.name)
	return untaken
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
func (w *waiter) leave() *handoff { return w.p.leave(w) }

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

// read is the reader goroutine: it dispatches messages and confirmations
// until the client closes. go-redis reconnects and re-subscribes the
// channels it knows by itself after a connection error; read only paces
// its retries.
func (p *pubsub) read(ps *redis.PubSub) {
	defer p.wg.Done()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			select {
			case <-p.closed:
				return
			default:
			}
			p.log.Warn("redisync: subscription connection lost; re-subscribing", "error", err)
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
			p.ack(m.Kind, m.Channel)
		}
	}
}

// connLost records that the connection, and every subscription on it, is
// gone: go-redis subscribes the channels it knows again on a new one, and
// the confirmations it gets there count afresh.
func (p *pubsub) connLost() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for name, s := range p.subs {
		if p.chans[name] == nil {
			delete(p.subs, name)
			continue
		}
		s.live, s.unsubs, s.sent = false, 0, now
	}
	if len(p.chans) > 0 {
		p.armRetry()
	}
}

func (p *pubsub) deliver(name, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return
	}
	ch.seq++
	if y, ok := ch.yielding(time.Now()); ok {
		// Other clients' turn (cohort.go): wake when the yield ends.
		if !ch.deferred {
			ch.deferred = true
			time.AfterFunc(time.Until(y), func() { p.wakeDeferred(ch, payload) })
		}
		return
	}
	wake(ch.waiters, ch.wake(payload))
}

// wakeDeferred delivers a wake-up held back while ch's waiters yielded.
func (p *pubsub) wakeDeferred(ch *channel, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch.deferred = false
	if p.chans[ch.name] == ch {
		ch.seq++
		wake(ch.waiters, ch.wake(payload))
	}
}

// ack applies a confirmation (kind "subscribe" or "unsubscribe"). When it
// makes a channel with waiters subscribed again, messages may have been
// missed while it was not: its waiters look again, as a message would have
// woken them.
func (p *pubsub) ack(kind, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.state(name)
	was := s.confirmed()
	switch kind {
	case "subscribe":
		s.live = true
	case "unsubscribe":
		s.live = false
		if s.unsubs > 0 {
			s.unsubs--
		}
	default:
		return
	}
	ch := p.chans[name]
	if ch == nil {
		if !s.live && s.unsubs == 0 {
			delete(p.subs, name)
		}
		return
	}
	if was || !s.confirmed() {
		return
	}
	select {
	case <-ch.ready:
		ch.seq++
		wake(ch.waiters, ch.wake(""))
	default:
		close(ch.ready) // the first confirmation: its waiters try once it comes
	}
}

// close ends the subscription and waits for its goroutines.
func (p *pubsub) close() {
	p.mu.Lock()
	ps := p.ps
	p.stopped = true
	if p.retry != nil {
		p.retry.Stop()
	}
	p.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	p.wg.Wait()
}
