package redisync

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsub is a Client's subscription to Redis. Waiters of every lock share
// it: a channel is subscribed while at least one local waiter needs it, and a
// message wakes as many local waiters of that channel as its policy says.
//
// In classic mode (PUBLISH/SUBSCRIBE) it is one connection. In sharded mode
// (SPUBLISH/SSUBSCRIBE, see PubSubMode) it is one connection per shard node
// that owns the slot of a channel with local waiters; each channel is
// subscribed on the connection to the node that owns its slot, as the
// cluster's slot map says. When the map changes (a failover, a slot
// migrated: Redis then unsubscribes the channels of the slot itself, or
// answers MOVED; or a connection error), the channel is routed again, moves
// to the right node's connection, and counts as unconfirmed until it is
// confirmed there.
//
// What Redis has subscribed is read from its own replies, never assumed from
// what was sent: a SUBSCRIBE counts once Redis confirmed it on the channel's
// connection, one whose write failed or whose confirmation does not come is
// sent again until it is, and a lost connection unconfirms every channel on
// it until it has been subscribed afresh (a failed write counts as one:
// go-redis then replaces the connection, maybe unseen by the reader, and
// the replies the old one owed never come). Whenever a channel becomes
// subscribed again while waiters wait on it (a reconnection, a rotation, a
// move to another node), a message may have been missed meanwhile, so its
// waiters look again. Messages can still be lost, so no wait relies on them
// alone: every wait also has a bound.
//
// Commands are written by one writer goroutine per connection, in the order
// of the state changes that queue them, and channels are routed to nodes by
// one router goroutine, so no waiter ever blocks on the network to
// subscribe or to leave.
type pubsub struct {
	rdb    redis.UniversalClient
	closed <-chan struct{}
	log    *slog.Logger
	// mode resolves the pub/sub mode (sharded or not); ok is false while
	// it cannot be told (the cluster unreachable). It may block.
	mode func(ctx context.Context) (sharded, ok bool)
	// hold says until when wake-ups on a channel are held back (the
	// cohort's yield to other clients), or false.
	hold func(channel string, now time.Time) (time.Time, bool)

	mu      sync.Mutex
	decided bool                // the mode is known (sharded says which)
	sharded bool                // SSUBSCRIBE, one connection per node
	conns   map[string]*subConn // by node address ("" for the one connection)
	chans   map[string]*channel // channels with local waiters
	routes  []string            // channels to route to a node, in order
	rkick   chan struct{}       // buffered 1: routes are queued
	router  bool                // the router goroutine runs
	retry   *time.Timer         // re-sends unconfirmed subscriptions
	armed   bool                // retry is pending
	stopped bool
	wg      sync.WaitGroup // readers, writers and the router
	obs     *Observer      // told of connections lost and restored (observe.go)
}

// subConn is one subscription connection: the only one in classic mode,
// or the one to one shard node.
type subConn struct {
	addr    string
	node    redis.UniversalClient // what it was opened on
	sharded bool
	ps      *redis.PubSub
	subs    map[string]*subState // what Redis's replies say of each channel
	ops     []subOp              // to write, in order
	kick    chan struct{}        // buffered 1: ops are queued
	gone    chan struct{}        // closed when it is retired
	retired bool
	moving  bool         // its channels are about to be routed again
	down    atomic.Int64 // when it was lost (Unix ns), 0 while up (observe.go)
}

// subOp is a SUBSCRIBE (sub) or UNSUBSCRIBE to write. An UNSUBSCRIBE that
// is not counted (forget) drops a channel that moved to another node: no
// state waits for its confirmation.
type subOp struct {
	sub    bool
	forget bool
	name   string
}

// subState is a channel's state on a connection, as its replies tell it.
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

// rerouteAfter is how long a channel whose node stopped serving it waits
// before it is routed again: the time for the cluster client's slot map to
// be reloaded.
const rerouteAfter = 100 * time.Millisecond

// avoidFor is how long a node that said it no longer serves a channel is
// taken not to, whatever the cluster client's slot map says: long enough
// for the cluster to agree on the change.
const avoidFor = 5 * time.Second

// channel is the local state of one subscribed channel.
type channel struct {
	name    string
	wake    func(payload string) int // waiters to wake per message; < 0 for all
	waiters []*waiter                // in arrival order
	wins    int                      // local waiters that won since the last rotation
	ready   chan struct{}            // closed at the channel's first confirmation
	seq     uint64                   // wake-ups so far (messages and re-subscriptions)
	until   time.Time                // when the holder's lease runs out, as last seen
	conn    *subConn                 // where it is subscribed; nil until routed
	routing bool                     // queued for the router
	// avoid is a connection whose node said it no longer serves the
	// channel: until avoidUntil, a route to it is taken for a stale slot
	// map, and the channel is routed again after a reload.
	avoid      *subConn
	avoidUntil time.Time
	deferred   bool // a wake-up is due when the hold on it ends

	// watchers are told every message, with its payload, and every
	// (re-)subscription (Election.Observe); the wake policy is not theirs.
	watchers []*waiter
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

// newPubSub returns the subscription of a client on rdb. mode resolves
// whether it is sharded; it is called by the router goroutine only, and
// first at the first subscription.
func newPubSub(rdb redis.UniversalClient, closed <-chan struct{}, log *slog.Logger,
	mode func(context.Context) (sharded, ok bool), hold func(string, time.Time) (time.Time, bool)) *pubsub {
	return &pubsub{
		rdb: rdb, closed: closed, log: log, mode: mode, hold: hold,
		conns: map[string]*subConn{}, chans: map[string]*channel{},
		rkick: make(chan struct{}, 1),
	}
}

// setMode fixes the mode before any subscription, when it is known when the
// Client is made.
func (p *pubsub) setMode(sharded bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decided, p.sharded = true, sharded
}

// Wake policies for subscribe.
func wakeOne(string) int { return 1 }
func wakeAll(string) int { return -1 }

// subscribe registers a waiter on name, subscribing the channel if it is the
// first local waiter. wake decides how many waiters a message wakes; the first
// subscriber of a channel sets it. The waiter must be left with leave. It
// fails only when the client is closed.
func (p *pubsub) subscribe(name string, wake func(string) int) (*waiter, error) {
	return p.register(name, wake, false)
}

// watch registers a watcher on name, subscribing the channel if it is the
// first local waiter or watcher: it is woken by every message, which it
// takes with take, and by every subscription and re-subscription (take
// then reports that messages may have been missed). wake is the policy of
// the channel's waiters, if it is the first. The watcher must be left with
// leave. It fails only when the client is closed.
func (p *pubsub) watch(name string, wake func(string) int) (*waiter, error) {
	return p.register(name, wake, true)
}

func (p *pubsub) register(name string, wake func(string) int, watcher bool) (*waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return nil, ErrClosed
	default:
	}
	ch := p.channel(name, wake)
	w := &waiter{p: p, ch: ch, c: make(chan struct{}, 1), watcher: watcher}
	if watcher {
		ch.watchers = append(ch.watchers, w)
	} else {
		ch.waiters = append(ch.waiters, w)
	}
	return w, nil
}

// channel returns the local state of channel name, subscribing it when it
// has none. Called with p.mu held.
func (p *pubsub) channel(name string, wake func(string) int) *channel {
	ch := p.chans[name]
	if ch == nil {
		ch = &channel{name: name, wake: wake, ready: make(chan struct{})}
		p.chans[name] = ch
		if p.decided && !p.sharded {
			p.attach(ch, p.conn("", p.rdb))
		} else {
			p.route(ch)
		}
	}
	return ch
}

// take returns the messages w, a watcher, has been told since it last
// took them, and whether it may have missed some meanwhile.
func (w *waiter) take() (msgs []string, missed bool) {
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

// confirmed reports whether ch is subscribed, as its connection's replies
// say. Called with p.mu held.
func (p *pubsub) confirmed(ch *channel) bool {
	return ch.conn != nil && ch.conn.state(ch.name).confirmed()
}

// state returns name's subscription state on c, creating it. Called with
// p.mu held.
func (c *subConn) state(name string) *subState {
	s := c.subs[name]
	if s == nil {
		s = &subState{}
		c.subs[name] = s
	}
	return s
}

// conn returns the connection to addr (made on node), opening it (its
// reader and writer) on first use. A connection to addr made on another
// node client (the cluster client replaced it) is retired first. Called
// with p.mu held.
func (p *pubsub) conn(addr string, node redis.UniversalClient) *subConn {
	if c := p.conns[addr]; c != nil {
		if c.node == node {
			return c
		}
		p.retire(c)
	}
	c := &subConn{
		addr: addr, node: node, sharded: p.sharded, subs: map[string]*subState{},
		kick: make(chan struct{}, 1), gone: make(chan struct{}),
	}
	if c.sharded {
		c.ps = node.SSubscribe(context.Background())
	} else {
		c.ps = node.Subscribe(context.Background())
	}
	p.conns[addr] = c
	p.wg.Add(2)
	go p.read(c)
	go p.write(c)
	return c
}

// retire closes c; its channels are routed again. Called with p.mu held.
func (p *pubsub) retire(c *subConn) {
	if c.retired {
		return
	}
	c.retired = true
	close(c.gone)
	if p.conns[c.addr] == c {
		delete(p.conns, c.addr)
	}
	for _, ch := range p.chans {
		if ch.conn == c {
			ch.conn = nil
			p.route(ch)
		}
	}
	go func() { _ = c.ps.Close() }()
}

// attach subscribes ch on c, where Redis delivers its messages. A channel
// that moves there from another connection is dropped from that one and
// subscribed afresh. Called with p.mu held.
func (p *pubsub) attach(ch *channel, c *subConn) {
	old := ch.conn
	if old == c {
		if !c.state(ch.name).confirmed() {
			p.queueSub(c, ch.name)
		}
		return
	}
	ch.conn = c
	if old == nil {
		if c.state(ch.name).confirmed() {
			p.confirm(ch)
		} else {
			p.queueSub(c, ch.name)
		}
		return
	}
	delete(old.subs, ch.name)
	p.queueOp(old, subOp{forget: true, name: ch.name})
	c.state(ch.name).live = false
	p.queueSub(c, ch.name)
}

// route queues ch for the router, which finds the node that owns its slot
// (or, until the mode is known, whether it has one). Called with p.mu held.
func (p *pubsub) route(ch *channel) {
	if p.stopped || ch.routing {
		return
	}
	ch.routing = true
	p.routes = append(p.routes, ch.name)
	if !p.router {
		p.router = true
		p.wg.Add(1)
		go p.routeLoop()
	}
	select {
	case p.rkick <- struct{}{}:
	default:
	}
	p.armRetry()
}

// routeLoop is the router goroutine: it resolves the mode, then routes each
// queued channel to its node's connection. Channels it cannot route now
// (the cluster unreachable) are routed again by the retry timer.
func (p *pubsub) routeLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.rkick:
		case <-p.closed:
			return
		}
		p.mu.Lock()
		decided := p.decided
		p.mu.Unlock()
		if !decided {
			ctx, cancel := context.WithTimeout(context.Background(), routeTimeout)
			sharded, ok := p.mode(ctx)
			cancel()
			if !ok {
				continue // the retry timer kicks again
			}
			p.mu.Lock()
			p.decided, p.sharded = true, sharded
			p.mu.Unlock()
		}
		p.mu.Lock()
		names := p.routes
		p.routes = nil
		p.mu.Unlock()
		for _, name := range names {
			addr, node, err := p.nodeFor(name)
			p.mu.Lock()
			ch := p.chans[name]
			if ch == nil || !ch.routing {
				p.mu.Unlock()
				continue
			}
			ch.routing = false
			if err != nil {
				p.log.Warn("redisync: cannot tell which node serves a channel; retrying", "channel", name, "error", err)
				p.mu.Unlock()
				continue // the retry timer routes it again
			}
			if ch.avoid != nil && ch.avoid.addr == addr && time.Now().Before(ch.avoidUntil) {
				p.reroute(ch.avoid, name, false) // the slot map is stale: reload it first
				p.mu.Unlock()
				continue
			}
			ch.avoid = nil
			if !p.stopped {
				p.attach(ch, p.conn(addr, node))
			}
			p.mu.Unlock()
		}
	}
}

// routeTimeout bounds one look-up of the mode or of a channel's node.
const routeTimeout = 2 * time.Second

// nodeFor returns the node that serves channel name, and its address: the
// master that owns its slot on a Cluster in sharded mode, else the client
// itself.
func (p *pubsub) nodeFor(name string) (string, redis.UniversalClient, error) {
	p.mu.Lock()
	sharded := p.sharded
	p.mu.Unlock()
	cc, ok := p.rdb.(*redis.ClusterClient)
	if !sharded || !ok {
		return "", p.rdb, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), routeTimeout)
	defer cancel()
	node, err := cc.MasterForKey(ctx, name)
	if err != nil {
		return "", nil, err
	}
	return node.Options().Addr, node, nil
}

// reroute routes again, after rerouteAfter, the channels of c (only name
// when it is not empty) after asking the cluster client to reload its slot
// map: c's node no longer serves them (gone is set: a route back to it
// within avoidFor is taken for a stale map), or may not. Called with p.mu
// held.
func (p *pubsub) reroute(c *subConn, name string, gone bool) {
	cc, ok := p.rdb.(*redis.ClusterClient)
	if !c.sharded || !ok || p.stopped {
		return
	}
	if name == "" {
		if c.moving {
			return
		}
		c.moving = true
	}
	cc.ReloadState(context.Background())
	time.AfterFunc(rerouteAfter, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if name == "" {
			c.moving = false
		}
		for _, ch := range p.chans {
			if (ch.conn == c || ch.avoid == c) && (name == "" || ch.name == name) {
				if gone && ch.avoid != c {
					ch.avoid, ch.avoidUntil = c, time.Now().Add(avoidFor)
				}
				p.route(ch)
			}
		}
	})
}

// queueSub queues a SUBSCRIBE of name on c and makes sure it is sent again
// if it goes unconfirmed. Called with p.mu held.
func (p *pubsub) queueSub(c *subConn, name string) {
	c.state(name).sent = time.Now()
	p.queueOp(c, subOp{sub: true, name: name})
	p.armRetry()
}

// queueUnsub queues an UNSUBSCRIBE of name on c. Called with p.mu held.
func (p *pubsub) queueUnsub(c *subConn, name string) {
	c.state(name).unsubs++
	p.queueOp(c, subOp{name: name})
}

// queueOp hands op to c's writer. Called with p.mu held.
func (p *pubsub) queueOp(c *subConn, op subOp) {
	if p.stopped || c.retired {
		return
	}
	c.ops = append(c.ops, op)
	select {
	case c.kick <- struct{}{}:
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
// channels it had before. In sharded mode the channel is routed again
// instead: its node may no longer serve it. Channels not yet routed are
// queued for the router again.
func (p *pubsub) resend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	pending := false
	kick := false
	for name, ch := range p.chans {
		if p.confirmed(ch) {
			continue
		}
		pending = true
		switch {
		case ch.conn == nil:
			kick = true
			if !ch.routing {
				p.route(ch)
			}
		case time.Since(ch.conn.state(name).sent) >= resendAfter:
			p.log.Warn("redisync: subscription not confirmed; sending it again", "channel", name)
			if ch.conn.sharded {
				ch.conn.state(name).sent = time.Now()
				p.route(ch)
			} else {
				p.queueSub(ch.conn, name)
			}
		}
	}
	if kick {
		select {
		case p.rkick <- struct{}{}:
		default:
		}
	}
	if pending {
		p.armRetry()
	}
}

// write is c's writer goroutine: it writes the queued commands in order
// until the client closes or c is retired, pausing after a failed write
// (see pause).
func (p *pubsub) write(c *subConn) {
	defer p.wg.Done()
	ctx := context.Background()
	sub, unsub := c.ps.Subscribe, c.ps.Unsubscribe
	if c.sharded {
		sub, unsub = c.ps.SSubscribe, c.ps.SUnsubscribe
	}
	backoff := firstBackoff
	for {
		select {
		case <-c.kick:
		case <-c.gone:
			return
		case <-p.closed:
			return
		}
		for {
			p.mu.Lock()
			if len(c.ops) == 0 || p.stopped || c.retired {
				p.mu.Unlock()
				break
			}
			op := c.ops[0]
			c.ops = c.ops[1:]
			p.mu.Unlock()
			do := unsub
			if op.sub {
				do = sub
			}
			err := do(ctx, op.name)
			if err == nil {
				backoff = firstBackoff
				continue
			}
			p.connDown(c, err)
			if p.writeFailed(c) || !p.pause(c, &backoff) {
				return
			}
		}
	}
}

// writeFailed records that a write on c failed. go-redis has then replaced
// c's connection and subscribed the channels it knew again on the new one,
// and c's reader may never see the old one fail (it was not reading it
// then): the old connection's replies, those it gave and those it still
// owed, no longer count, as when the reader sees it fail (connLost). The
// write that failed is not sent again: each channel of c is subscribed
// again instead, after the UNSUBSCRIBEs still queued (the SUBSCRIBEs
// queued are dropped), so its confirmation comes on the new connection
// and wakes its waiters. It reports whether c was retired.
func (p *pubsub) writeFailed(c *subConn) (retired bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lost(c) {
		return true
	}
	c.ops = slices.DeleteFunc(c.ops, func(op subOp) bool { return op.sub })
	for _, ch := range p.chans {
		if ch.conn == c {
			p.queueSub(c, ch.name)
		}
	}
	return false
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
	if !p.confirmed(ch) {
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
// subscribers in the order they subscribed (sharded channels too), and the
// first client to hear an unlock usually wins the race for the lock; a
// client that keeps winning goes last, so the clients take turns and none
// starves.
//
// An unlock published between the UNSUBSCRIBE and the SUBSCRIBE is not
// heard; the waiters look again once the SUBSCRIBE is confirmed.
func (p *pubsub) rotate(name string) {
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
func (p *pubsub) leave(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := w.ch
	if w.watcher {
		ch.watchers = slices.DeleteFunc(ch.watchers, func(x *waiter) bool { return x == w })
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

// nudge wakes one local waiter of channel name, if it has any: a waiter
// that was woken on it left for another channel without using the
// wake-up (a MultiLock found another of its names held).
func (p *pubsub) nudge(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch := p.chans[name]; ch != nil {
		wake(ch.waiters, 1)
	}
}

// leave ends the wait; see pubsub.leave.
func (w *waiter) leave() { w.p.leave(w) }

// wakeNow wakes w, without blocking.
func (w *waiter) wakeNow() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// confirmedOn reports whether channel name is subscribed, as its
// connection's replies say.
func (p *pubsub) confirmedOn(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	return ch != nil && p.confirmed(ch)
}

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

// firstBackoff is how long a connection's reader or writer pauses after
// a first failure; see pause.
const firstBackoff = 10 * time.Millisecond

// pause waits *backoff after a failure on c, then doubles it, up to a
// second, for the next failure in a row. It reports false, at once, when
// the client closes or c is retired first.
func (p *pubsub) pause(c *subConn, backoff *time.Duration) bool {
	select {
	case <-time.After(*backoff):
	case <-c.gone:
		return false
	case <-p.closed:
		return false
	}
	*backoff = min(*backoff*2, time.Second)
	return true
}

// read is c's reader goroutine: it dispatches messages and confirmations
// until the client closes or c is retired. go-redis reconnects and
// re-subscribes the channels it knows by itself after a connection error;
// read only paces its retries. An error reply (MOVED: the node no longer
// serves a channel's slot) routes c's channels again.
func (p *pubsub) read(c *subConn) {
	defer p.wg.Done()
	backoff := firstBackoff
	for {
		msg, err := c.ps.Receive(context.Background())
		if err != nil {
			select {
			case <-p.closed:
				return
			case <-c.gone:
				return
			default:
			}
			var re redis.Error
			if errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) {
				p.log.Warn("redisync: subscription refused; routing its channels again", "node", c.addr, "error", err)
				p.mu.Lock()
				p.reroute(c, "", isMoved(err))
				p.mu.Unlock()
				continue
			}
			p.log.Warn("redisync: subscription connection lost; re-subscribing", "node", c.addr, "error", err)
			p.connDown(c, err)
			if p.connLost(c) || !p.pause(c, &backoff) {
				return
			}
			continue
		}
		backoff = firstBackoff
		p.connUp(c)
		switch m := msg.(type) {
		case *redis.Message:
			p.deliver(m.Channel, m.Payload)
		case *redis.Subscription:
			p.ack(c, m.Kind, m.Channel)
		}
	}
}

// connLost records that c's connection, and every subscription on it, is
// gone: go-redis subscribes the channels it knows again on a new one, and
// the confirmations it gets there count afresh. In sharded mode its
// channels are routed again (the node may be gone for good, and go-redis
// re-subscribes them all in one command, which Redis refuses when they are
// in different slots); a node connection left without channels is retired
// (retired reports it).
func (p *pubsub) connLost(c *subConn) (retired bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost(c)
}

// lost is connLost with p.mu held.
func (p *pubsub) lost(c *subConn) (retired bool) {
	now := time.Now()
	used := false
	for name, s := range c.subs {
		if ch := p.chans[name]; ch == nil || ch.conn != c {
			delete(c.subs, name)
			continue
		}
		used = true
		s.live, s.unsubs, s.sent = false, 0, now
	}
	// The UNSUBSCRIBEs still queued go out on the new connection: their
	// replies are owed there.
	for _, op := range c.ops {
		if !op.sub && !op.forget {
			c.state(op.name).unsubs++
		}
	}
	if c.sharded && c.addr != "" {
		if !used {
			p.retire(c)
			return true
		}
		p.reroute(c, "", false)
	}
	if len(p.chans) > 0 {
		p.armRetry()
	}
	return false
}

func (p *pubsub) deliver(name, payload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.chans[name]
	if ch == nil {
		return
	}
	ch.seq++
	tell(ch, payload, false)
	if y, ok := p.hold(ch.name, time.Now()); ok {
		// Other clients' turn (cohort.go): wake when the hold ends.
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

// ack applies a confirmation on c (kind "subscribe", "unsubscribe", or
// their sharded forms). A subscription confirmed on a channel with waiters
// may follow a time when it was not (a new connection, a rotation, a move),
// and messages may have been missed then: its waiters look again, as a
// message would have woken them. An unsubscription nobody asked
// for is Redis's own, when the node stops serving the channel's slot: the
// channel is routed again.
func (p *pubsub) ack(c *subConn, kind, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := c.state(name)
	ch := p.chans[name]
	if ch != nil && ch.conn != c {
		ch = nil // a late reply from a connection it moved away from
	}
	sub := false
	switch kind {
	case "subscribe", "ssubscribe":
		s.live, sub = true, true
	case "unsubscribe", "sunsubscribe":
		s.live = false
		if s.unsubs > 0 {
			s.unsubs--
		} else if ch != nil && c.sharded {
			p.log.Warn("redisync: the node stopped serving a channel; routing it again", "channel", name, "node", c.addr)
			p.reroute(c, name, true)
		}
	default:
		return
	}
	if ch == nil {
		// No local waiter needs the channel on c: only the replies its
		// UNSUBSCRIBEs still owe are awaited. A confirmation with none
		// owed is not trusted: it can be a reply read from a connection
		// go-redis has since replaced (a failed write) after writeFailed
		// reset c's states, for a channel the new connection does not
		// have. Kept, it would make the channel's next waiter count it as
		// subscribed and send nothing; dropped, that waiter subscribes it.
		if s.unsubs == 0 {
			delete(c.subs, name)
		}
		return
	}
	if !sub || !s.confirmed() {
		return
	}
	// Every confirmation counts, even of a channel that seemed subscribed
	// all along: go-redis subscribes its channels again on a new
	// connection by itself when a write finds the old one dead, and this
	// reader may never see the old one fail. An unlock published between
	// the two connections was lost: the waiters look again.
	p.confirm(ch)
}

// confirm records that ch has become subscribed. Called with p.mu held.
func (p *pubsub) confirm(ch *channel) {
	tell(ch, "", true)
	select {
	case <-ch.ready:
		ch.seq++
		wake(ch.waiters, ch.wake(""))
	default:
		close(ch.ready) // the first confirmation: its waiters try once it comes
	}
}

// isMoved reports a MOVED (or ASK) reply: the node does not serve the slot.
func isMoved(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// close ends the subscription and waits for its goroutines.
func (p *pubsub) close() {
	p.mu.Lock()
	p.stopped = true
	if p.retry != nil {
		p.retry.Stop()
	}
	var pss []*redis.PubSub
	for _, c := range p.conns {
		pss = append(pss, c.ps)
	}
	p.mu.Unlock()
	for _, ps := range pss {
		_ = ps.Close()
	}
	p.wg.Wait()
}
