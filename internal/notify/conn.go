package notify

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	down    atomic.Int64 // when it was lost (Unix ns), 0 while up (see connDown)
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

// confirmed reports whether ch is subscribed, as its connection's replies
// say. Called with p.mu held.
func (p *Hub) confirmed(ch *channel) bool {
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
func (p *Hub) conn(addr string, node redis.UniversalClient) *subConn {
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
func (p *Hub) retire(c *subConn) {
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
func (p *Hub) attach(ch *channel, c *subConn) {
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

// queueSub queues a SUBSCRIBE of name on c and makes sure it is sent again
// if it goes unconfirmed. Called with p.mu held.
func (p *Hub) queueSub(c *subConn, name string) {
	c.state(name).sent = time.Now()
	p.queueOp(c, subOp{sub: true, name: name})
	p.armRetry()
}

// queueUnsub queues an UNSUBSCRIBE of name on c. Called with p.mu held.
func (p *Hub) queueUnsub(c *subConn, name string) {
	c.state(name).unsubs++
	p.queueOp(c, subOp{name: name})
}

// queueOp hands op to c's writer. Called with p.mu held.
func (p *Hub) queueOp(c *subConn, op subOp) {
	if p.stopped || c.retired {
		return
	}
	c.ops = append(c.ops, op)
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// write is c's writer goroutine: it writes the queued commands in order
// until the Hub closes or c is retired, pausing after a failed write
// (see pause).
func (p *Hub) write(c *subConn) {
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
func (p *Hub) writeFailed(c *subConn) (retired bool) {
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

// firstBackoff is how long a connection's reader or writer pauses after
// a first failure; see pause.
const firstBackoff = 10 * time.Millisecond

// pause waits *backoff after a failure on c, then doubles it, up to a
// second, for the next failure in a row. It reports false, at once, when
// the client closes or c is retired first.
func (p *Hub) pause(c *subConn, backoff *time.Duration) bool {
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
// until the Hub closes or c is retired. go-redis reconnects and
// re-subscribes the channels it knows by itself after a connection error;
// read only paces its retries. An error reply (MOVED: the node no longer
// serves a channel's slot) routes c's channels again.
func (p *Hub) read(c *subConn) {
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
func (p *Hub) connLost(c *subConn) (retired bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost(c)
}

// lost is connLost with p.mu held.
func (p *Hub) lost(c *subConn) (retired bool) {
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

// ack applies a confirmation on c (kind "subscribe", "unsubscribe", or
// their sharded forms). A subscription confirmed on a channel with waiters
// may follow a time when it was not (a new connection, a rotation, a move),
// and messages may have been missed then: its waiters look again, as a
// message would have woken them. An unsubscription nobody asked
// for is Redis's own, when the node stops serving the channel's slot: the
// channel is routed again.
func (p *Hub) ack(c *subConn, kind, name string) {
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
func (p *Hub) confirm(ch *channel) {
	tell(ch, "", true)
	select {
	case <-ch.ready:
		ch.seq++
		wake(ch.waiters, ch.wake(""))
	default:
		close(ch.ready) // the first confirmation: its waiters try once it comes
	}
}

// connDown records that c's connection was lost, by err, and tells
// Config.Lost if it was up until now.
func (p *Hub) connDown(c *subConn, err error) {
	p.evMu.Lock()
	defer p.evMu.Unlock()
	if c.down.CompareAndSwap(0, time.Now().UnixNano()) && p.lostFn != nil {
		p.lostFn(c.addr, err)
	}
}

// connUp records that a reply was read from c, and tells Config.Restored
// when c was lost until now.
func (p *Hub) connUp(c *subConn) {
	if c.down.Load() == 0 {
		return // up all along: the reply path takes no lock
	}
	p.evMu.Lock()
	defer p.evMu.Unlock()
	if t := c.down.Swap(0); t != 0 && p.restoredFn != nil {
		p.restoredFn(c.addr, time.Since(time.Unix(0, t)))
	}
}
