package notify

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hub is a client's subscription to Redis. Waiters of every lock share
// it: a channel is subscribed while at least one local waiter needs it, and a
// message wakes as many local waiters of that channel as its policy says.
//
// In classic mode (PUBLISH/SUBSCRIBE) it is one connection. In sharded mode
// (SPUBLISH/SSUBSCRIBE, see Config.Mode) it is one connection per shard node
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
type Hub struct {
	rdb       redis.UniversalClient
	closed    <-chan struct{}
	closedErr error
	log       *slog.Logger
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
	// evMu orders a connection's lost and restored events: the reader may
	// read from a new connection while the writer that saw the old one
	// fail is still telling it lost.
	evMu sync.Mutex
	// lostFn and restoredFn are Config.Lost and Config.Restored.
	lostFn     func(node string, err error)
	restoredFn func(node string, down time.Duration)
	// watch is Config.Watch; unwatch ends its want while the Hub has
	// channels (nil while it has none).
	watch   func() (done func())
	unwatch func()
}

// channel is the local state of one subscribed channel.
type channel struct {
	name    string
	wake    func(payload string) int // waiters to wake per message; < 0 for all
	waiters []*Waiter                // in arrival order
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
	watchers []*Waiter
}

// Config is what a Hub is made with.
type Config struct {
	// RDB is the client whose subscriptions the Hub makes.
	RDB redis.UniversalClient
	// Closed is closed when the Hub's owner closes: every wait then ends
	// with ClosedErr, and nothing new is subscribed.
	Closed    <-chan struct{}
	ClosedErr error
	Log       *slog.Logger
	// Mode resolves the pub/sub mode (sharded or not); ok is false while
	// it cannot be told (the cluster unreachable). It may block. It is
	// called by the router goroutine only, first at the first
	// subscription, unless SetMode fixed the mode before.
	Mode func(ctx context.Context) (sharded, ok bool)
	// Hold says until when wake-ups on a channel are held back (the
	// owner's waiters yield to other clients), or false.
	Hold func(channel string, now time.Time) (time.Time, bool)
	// Lost and Restored, when set, are told when a subscription
	// connection (node is its address, "" for the classic one) is lost
	// and when a reply is read from it again, after down.
	Lost     func(node string, err error)
	Restored func(node string, down time.Duration)
	// Watch, when set, is called when the Hub gets its first channel,
	// and its done when the last one is left (or at Close): the switches
	// of the primary (see Switched) are wanted meanwhile
	// (transport.Transport.WatchSwitches). It must not block.
	Watch func() (done func())
}

// New returns the subscription hub of cfg.RDB. It opens no connection
// before the first Subscribe or Watch.
func New(cfg Config) *Hub {
	return &Hub{
		rdb: cfg.RDB, closed: cfg.Closed, closedErr: cfg.ClosedErr, log: cfg.Log, mode: cfg.Mode, hold: cfg.Hold,
		lostFn: cfg.Lost, restoredFn: cfg.Restored, watch: cfg.Watch,
		conns: map[string]*subConn{}, chans: map[string]*channel{},
		rkick: make(chan struct{}, 1),
	}
}

// SetMode fixes the mode before any subscription, when it is known when the
// Hub is made.
func (p *Hub) SetMode(sharded bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decided, p.sharded = true, sharded
}

// Subscribe registers a waiter on name, subscribing the channel if it is the
// first local waiter. wake decides how many waiters a message wakes; the first
// subscriber of a channel sets it. The waiter must be left with Leave. It
// fails only when the Hub is closed (Config.ClosedErr).
func (p *Hub) Subscribe(name string, wake func(string) int) (*Waiter, error) {
	return p.register(name, wake, false)
}

// Watch registers a watcher on name, subscribing the channel if it is the
// first local waiter or watcher: it is woken by every message, which it
// takes with Take, and by every subscription and re-subscription (Take
// then reports that messages may have been missed). wake is the policy of
// the channel's waiters, if it is the first. The watcher must be left with
// Leave. It fails only when the Hub is closed (Config.ClosedErr).
func (p *Hub) Watch(name string, wake func(string) int) (*Waiter, error) {
	return p.register(name, wake, true)
}

func (p *Hub) register(name string, wake func(string) int, watcher bool) (*Waiter, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		return nil, p.closedErr
	default:
	}
	ch := p.channel(name, wake)
	w := &Waiter{p: p, ch: ch, c: make(chan struct{}, 1), watcher: watcher}
	if watcher {
		ch.watchers = append(ch.watchers, w)
	} else {
		ch.waiters = append(ch.waiters, w)
	}
	return w, nil
}

// channel returns the local state of channel name, subscribing it when it
// has none. Called with p.mu held.
func (p *Hub) channel(name string, wake func(string) int) *channel {
	ch := p.chans[name]
	if ch == nil {
		ch = &channel{name: name, wake: wake, ready: make(chan struct{})}
		p.chans[name] = ch
		if p.watch != nil && p.unwatch == nil {
			p.unwatch = p.watch()
		}
		if p.decided && !p.sharded {
			p.attach(ch, p.conn("", p.rdb))
		} else {
			p.route(ch)
		}
	}
	return ch
}

// Close ends the subscription and waits for its goroutines.
func (p *Hub) Close() {
	p.mu.Lock()
	p.stopped = true
	if p.retry != nil {
		p.retry.Stop()
	}
	var pss []*redis.PubSub
	for addr, c := range p.conns {
		pss = append(pss, c.ps)
		delete(p.conns, addr)
	}
	p.unwatched()
	p.mu.Unlock()
	for _, ps := range pss {
		_ = ps.Close()
	}
	p.wg.Wait()
}
