package notify

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ResendAfter is how long a SUBSCRIBE may go unconfirmed before it is sent
// again.
const ResendAfter = time.Second

// rerouteAfter is how long a channel whose node stopped serving it waits
// before it is routed again: the time for the cluster client's slot map to
// be reloaded.
const rerouteAfter = 100 * time.Millisecond

// avoidFor is how long a node that said it no longer serves a channel is
// taken not to, whatever the cluster client's slot map says: long enough
// for the cluster to agree on the change.
const avoidFor = 5 * time.Second

// route queues ch for the router, which finds the node that owns its slot
// (or, until the mode is known, whether it has one). Called with p.mu held.
func (p *Hub) route(ch *channel) {
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
func (p *Hub) routeLoop() {
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
func (p *Hub) nodeFor(name string) (string, redis.UniversalClient, error) {
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
func (p *Hub) reroute(c *subConn, name string, gone bool) {
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

// armRetry schedules a look for unconfirmed subscriptions. Called with p.mu held.
func (p *Hub) armRetry() {
	if p.armed || p.stopped {
		return
	}
	p.armed = true
	if p.retry == nil {
		p.retry = time.AfterFunc(ResendAfter, p.resend)
	} else {
		p.retry.Reset(ResendAfter)
	}
}

// resend sends again every SUBSCRIBE that has gone unconfirmed for
// ResendAfter: its write may have failed after go-redis recorded the
// channel, and a reconnection within that write re-subscribes only the
// channels it had before. In sharded mode the channel is routed again
// instead: its node may no longer serve it. Channels not yet routed are
// queued for the router again.
func (p *Hub) resend() {
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
		case time.Since(ch.conn.state(name).sent) >= ResendAfter:
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

// isMoved reports a MOVED (or ASK) reply: the node does not serve the slot.
func isMoved(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}
