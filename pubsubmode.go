package redisync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/errs"
)

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
		c.mode.want = mode
		return nil
	}
}

// PubSub returns the pub/sub mode the Client uses: PubSubClassic or
// PubSubSharded, or PubSubAuto while it has not been able to tell (a
// cluster unreachable since New; it tries again when it needs to).
func (c *Client) PubSub() PubSubMode {
	if c == nil {
		return PubSubAuto
	}
	return PubSubMode(c.mode.got.Load())
}

// pubMode is a Client's pub/sub mode: wanted, and as resolved.
type pubMode struct {
	rdb  redis.UniversalClient
	want PubSubMode
	got  atomic.Uint32 // a PubSubMode; PubSubAuto until resolved

	changed func(from, to PubSubMode) // told when detection settles the mode

	mu        sync.Mutex  // one detection at a time
	last      time.Time   // when the last detection failed
	detecting atomic.Bool // a background detection runs (current)
}

// detectTimeout bounds New's detection of the mode; detectEvery paces the
// later attempts while it fails.
const (
	detectTimeout = 2 * time.Second
	detectEvery   = time.Second
)

// init resolves the mode when it needs no look-up, and otherwise starts a
// detection and waits for it at most detectTimeout: when the cluster cannot
// be reached, New still succeeds and the mode is detected later, when first
// needed (go-redis honours a command's context only with
// ContextTimeoutEnabled, so the wait is bounded here).
func (m *pubMode) init() {
	switch {
	case m.want != PubSubAuto:
		m.got.Store(uint32(m.want))
		return
	case !isCluster(m.rdb):
		m.got.Store(uint32(PubSubClassic))
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
		defer cancel()
		m.resolve(ctx, true)
	}()
	t := time.NewTimer(detectTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// resolve returns the mode, detecting it if it is not known yet (at most
// once per detectEvery while detection fails); ok is false when it is
// still unknown. Unless block, it does not wait for a detection under way.
func (m *pubMode) resolve(ctx context.Context, block bool) (mode PubSubMode, ok bool) {
	if got := PubSubMode(m.got.Load()); got != PubSubAuto {
		return got, true
	}
	if block {
		m.mu.Lock()
	} else if !m.mu.TryLock() {
		return PubSubAuto, false
	}
	defer m.mu.Unlock()
	if got := PubSubMode(m.got.Load()); got != PubSubAuto {
		return got, true
	}
	if !m.last.IsZero() && time.Since(m.last) < detectEvery {
		return PubSubAuto, false
	}
	sharded, err := detectSharded(ctx, m.rdb.(*redis.ClusterClient))
	if err != nil {
		m.last = time.Now()
		return PubSubAuto, false
	}
	mode = PubSubClassic
	if sharded {
		mode = PubSubSharded
	}
	m.got.Store(uint32(mode))
	if m.changed != nil {
		m.changed(PubSubAuto, mode)
	}
	return mode, true
}

// sharded is resolve for the subscription.
func (m *pubMode) sharded(ctx context.Context) (sharded, ok bool) {
	mode, ok := m.resolve(ctx, true)
	return mode == PubSubSharded, ok
}

// current returns the mode as resolved, without waiting: PubSubAuto while
// it is unknown, and then it starts a detection in the background (one at
// a time, at most once per detectEvery), so that no caller's path ever
// waits for the cluster's answer.
func (m *pubMode) current() PubSubMode {
	if got := PubSubMode(m.got.Load()); got != PubSubAuto {
		return got
	}
	if m.detecting.CompareAndSwap(false, true) {
		go func() {
			defer m.detecting.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), detectTimeout)
			defer cancel()
			m.resolve(ctx, false)
		}()
	}
	return PubSubAuto
}

// publish returns the command the scripts publish with: "spublish" in
// sharded mode, "publish" in classic mode and while the mode is unknown
// (the cluster was unreachable when last asked, or a detection is under
// way). It never waits for a detection.
func (m *pubMode) publish() string {
	if m.current() == PubSubSharded {
		return "spublish"
	}
	return "publish"
}

// detectSharded tells whether every master of cc supports sharded pub/sub,
// by running PUBSUB SHARDNUMSUB on each (Redisson's AUTO mode runs it once,
// on the first node it connects to). A master that refuses it (Redis below
// 7) makes the answer no; a network error, or a cluster not ready, is
// returned.
func detectSharded(ctx context.Context, cc *redis.ClusterClient) (bool, error) {
	var masters atomic.Int32
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		masters.Add(1)
		return node.Do(ctx, "PUBSUB", "SHARDNUMSUB").Err()
	})
	var re redis.Error
	switch {
	case err == nil && masters.Load() == 0:
		return false, errors.New("redisync: the cluster has no master yet")
	case err == nil:
		return true, nil
	case errors.As(err, &re) && !errs.NotReady(err):
		return false, nil
	default:
		return false, err
	}
}
