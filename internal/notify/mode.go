package notify

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/transport"
)

// The pub/sub modes, numbered as the root package's PubSubMode numbers
// them: wanted (Auto: detect it) and resolved (Auto: not known yet).
const (
	Auto uint8 = iota
	Classic
	Sharded
)

// Mode is a Client's pub/sub mode: wanted, and as resolved. On a Cluster,
// Auto is resolved by asking every master whether it supports sharded
// pub/sub (PUBSUB SHARDNUMSUB), as Redisson's AUTO mode asks one.
type Mode struct {
	rdb  redis.UniversalClient
	want uint8
	got  atomic.Uint32 // Auto until resolved

	changed func(from, to uint8) // told when detection settles the mode

	mu        sync.Mutex  // one detection at a time
	last      time.Time   // when the last detection failed
	detecting atomic.Bool // a background detection runs (current)
}

// DetectTimeout bounds New's detection of the mode; DetectEvery paces the
// later attempts while it fails.
const (
	DetectTimeout = 2 * time.Second
	DetectEvery   = time.Second
)

// NewMode returns the mode of rdb, wanted as want; changed (unless nil) is
// told when a detection settles it. It resolves the mode at once when it
// needs no look-up, and otherwise starts a detection and waits for it at
// most DetectTimeout (see init).
func NewMode(rdb redis.UniversalClient, want uint8, changed func(from, to uint8)) *Mode {
	m := &Mode{rdb: rdb, want: want, changed: changed}
	m.init()
	return m
}

// Get returns the mode as resolved, Auto while it is not known.
func (m *Mode) Get() uint8 { return uint8(m.got.Load()) }

// init resolves the mode when it needs no look-up, and otherwise starts a
// detection and waits for it at most DetectTimeout: when the cluster cannot
// be reached, New still succeeds and the mode is detected later, when first
// needed (go-redis honours a command's context only with
// ContextTimeoutEnabled, so the wait is bounded here).
func (m *Mode) init() {
	switch {
	case m.want != Auto:
		m.got.Store(uint32(m.want))
		return
	case !transport.IsCluster(m.rdb):
		m.got.Store(uint32(Classic))
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), DetectTimeout)
		defer cancel()
		m.resolve(ctx, true)
	}()
	t := time.NewTimer(DetectTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// resolve returns the mode, detecting it if it is not known yet (at most
// once per DetectEvery while detection fails); ok is false when it is
// still unknown. Unless block, it does not wait for a detection under way.
func (m *Mode) resolve(ctx context.Context, block bool) (mode uint8, ok bool) {
	if got := uint8(m.got.Load()); got != Auto {
		return got, true
	}
	if block {
		m.mu.Lock()
	} else if !m.mu.TryLock() {
		return Auto, false
	}
	defer m.mu.Unlock()
	if got := uint8(m.got.Load()); got != Auto {
		return got, true
	}
	if !m.last.IsZero() && time.Since(m.last) < DetectEvery {
		return Auto, false
	}
	sharded, err := detectSharded(ctx, m.rdb.(*redis.ClusterClient))
	if err != nil {
		m.last = time.Now()
		return Auto, false
	}
	mode = Classic
	if sharded {
		mode = Sharded
	}
	m.got.Store(uint32(mode))
	if m.changed != nil {
		m.changed(Auto, mode)
	}
	return mode, true
}

// Sharded is resolve for the subscription (Config.Mode).
func (m *Mode) Sharded(ctx context.Context) (sharded, ok bool) {
	mode, ok := m.resolve(ctx, true)
	return mode == Sharded, ok
}

// Current returns the mode as resolved, without waiting: Auto while
// it is unknown, and then it starts a detection in the background (one at
// a time, at most once per DetectEvery), so that no caller's path ever
// waits for the cluster's answer.
func (m *Mode) Current() uint8 {
	if got := uint8(m.got.Load()); got != Auto {
		return got
	}
	if m.detecting.CompareAndSwap(false, true) {
		go func() {
			defer m.detecting.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), DetectTimeout)
			defer cancel()
			m.resolve(ctx, false)
		}()
	}
	return Auto
}

// Publish returns the command the scripts publish with: "spublish" in
// sharded mode, "publish" in classic mode and while the mode is unknown
// (the cluster was unreachable when last asked, or a detection is under
// way). It never waits for a detection.
func (m *Mode) Publish() string {
	if m.Current() == Sharded {
		return "spublish"
	}
	return "publish"
}

// SubCounter names how lua/handoff.lua counts the subscribers of a channel
// published with pub: on the lock's node for sharded pub/sub and on a
// single node; not at all ("any": others are assumed to wait) for classic
// pub/sub on a Cluster, whose subscribers may be on any node.
func (m *Mode) SubCounter(pub string) string {
	switch {
	case pub == "spublish":
		return "shardnumsub"
	case transport.IsCluster(m.rdb):
		return "any"
	}
	return "numsub"
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
