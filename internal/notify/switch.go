package notify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/transport"
)

// The subscription follows the primary. A planned failover leaves the old
// primary answering as one for a while (about 10s under Sentinel), and
// go-redis does not move a subscription connection when its failover
// client moves its command connections: a subscription left there hears
// none of the unlocks published on the new primary, and its waiters would
// wait for their bounds (the holder's lease). The transport learns the
// switch (transport.Switch) and tells Switched, which moves the channels
// it concerns to a connection on the new primary at once; each
// confirmation there wakes the channel's waiters, as every
// re-subscription does, so they try again (a release published while
// they listened to the old primary was missed).

// Switched moves the subscriptions that s concerns to the new primary:
//
//   - On a single node or Sentinel (one server serves every channel), every
//     subscription connection is closed and its channels are subscribed
//     again on a new one, which go-redis dials to the primary its failover
//     client names now.
//   - On a Cluster in sharded mode, the channels whose slots s covers and
//     whose connection is not on s.To are routed again once the cluster
//     client has reloaded its slot map (rerouteAfter), away from the node
//     they were on (a map that still names it within avoidFor is taken
//     for a stale one and read again).
//   - On a Cluster in classic mode nothing moves: a PUBLISH reaches the
//     subscribers of every node, replicas and a demoted master included.
//
// It never blocks on the network.
func (p *Hub) Switched(s transport.Switch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	cc, cluster := p.rdb.(*redis.ClusterClient)
	if !cluster {
		for _, c := range p.conns {
			p.log.Info("redisync: the primary changed; subscribing on the new one", "from", s.From.ReplID, "to", s.To.ReplID, "cause", s.Cause)
			p.retire(c)
		}
		return
	}
	if !p.decided || !p.sharded {
		return
	}
	var moved []*channel
	for _, ch := range p.chans {
		c := ch.conn
		if c == nil || !c.sharded || c.addr == "" || (s.To.Addr != "" && c.addr == s.To.Addr) || !s.CoversKey(ch.name) {
			continue
		}
		moved = append(moved, ch)
	}
	if len(moved) == 0 {
		return
	}
	p.log.Info("redisync: slots changed primary; moving their subscriptions", "from", s.From.Addr, "to", s.To.Addr, "channels", len(moved), "cause", s.Cause)
	cc.ReloadState(context.Background())
	until := time.Now().Add(avoidFor)
	for _, ch := range moved {
		ch.avoid, ch.avoidUntil = ch.conn, until
	}
	time.AfterFunc(rerouteAfter, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, ch := range moved {
			if p.chans[ch.name] == ch {
				p.route(ch)
			}
		}
	})
}

// unwatched ends the Hub's want of switches (Config.Watch), if it has
// one. Called with p.mu held.
func (p *Hub) unwatched() {
	if u := p.unwatch; u != nil {
		p.unwatch = nil
		u()
	}
}
