package redisync

import "fmt"

// PubSubMode chooses how a Client's unlocks wake waiters: with classic
// pub/sub (PUBLISH and SUBSCRIBE) or with sharded pub/sub (SPUBLISH and
// SSUBSCRIBE, Redis 7+). The two are separate namespaces in Redis: a
// message published one way is not heard by a subscriber of the other, so
// every process that shares locks (redisync Clients and Redisson clients
// alike) must use the same mode.
type PubSubMode uint8

const (
	// PubSubAuto, the default, is the counterpart of Redisson's AUTO mode:
	// sharded pub/sub on a Redis Cluster (a *redis.ClusterClient, or a
	// UniversalClient that is one) whose masters all support it (PUBSUB
	// SHARDNUMSUB answers on every master), classic pub/sub otherwise
	// (single node, Sentinel, Redis below 7). Redisson asks only the first
	// node it connects to, so while a Cluster's nodes run different
	// versions the two can choose differently: choose the mode on both
	// sides then.
	PubSubAuto PubSubMode = iota
	// PubSubClassic always uses PUBLISH and SUBSCRIBE: for a cluster shared
	// with Redisson clients configured with sharded pub/sub off
	// (shardedSubscriptionMode OFF, Redisson 3.29.0 and later), and for a
	// cluster whose nodes do not all run Redis 7 yet.
	PubSubClassic
	// PubSubSharded always uses SPUBLISH and SSUBSCRIBE (Redis 7+). On a
	// Cluster, each channel is subscribed on the node that owns its slot,
	// one connection per node. On a single node or Sentinel it works too,
	// with one connection, but Redisson uses classic pub/sub there: do not
	// force it when sharing locks with Redisson outside a Cluster.
	PubSubSharded
)

// String returns "auto", "classic" or "sharded".
func (m PubSubMode) String() string {
	switch m {
	case PubSubAuto:
		return "auto"
	case PubSubClassic:
		return "classic"
	case PubSubSharded:
		return "sharded"
	}
	return fmt.Sprintf("PubSubMode(%d)", uint8(m))
}

// WithPubSub chooses the pub/sub mode (default PubSubAuto). An unknown mode
// is refused with ErrInvalid.
func WithPubSub(mode PubSubMode) Option {
	return func(c *Client) error {
		if mode > PubSubSharded {
			return fmt.Errorf("%w: unknown pub/sub mode %v", ErrInvalid, mode)
		}
		c.pubWant = mode
		return nil
	}
}

// PubSub returns the pub/sub mode the Client uses: PubSubClassic or
// PubSubSharded, or PubSubAuto while it has not been able to tell (a
// cluster unreachable since New; it tries again when it needs to).
func (c *Client) PubSub() PubSubMode {
	if c == nil || c.mode == nil {
		return PubSubAuto
	}
	return PubSubMode(c.mode.Get())
}
