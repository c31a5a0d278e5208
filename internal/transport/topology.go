package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/keys"
)

// What the layers above may ask of the topology, without asking which one
// it is: whether a redis client is one redisync works with (CheckClient),
// the route a key's calls take (Route: its slot on a Cluster, one route
// elsewhere; the names' checks, a MultiLock's groups, the healer's
// routes), whether it is a Cluster's (IsCluster: the subscriptions' mode),
// its ReadTimeout (WithReplicaAck's bound), and, after a
// failover, which primary serves each key (Primaries). Everything else
// that knows the topology (slot routing, MOVED, ASK, TRYAGAIN, the
// masters' own connections) is in this package's paths; the subscriptions'
// side of it is in internal/notify.

// CheckClient returns why rdb is not a redis client a Client can work
// with, or nil: it must be a non-nil *redis.Client (single node,
// Sentinel) or *redis.ClusterClient. The error's text is meant to follow
// the caller's sentinel ("<sentinel>: <text>").
func CheckClient(rdb redis.UniversalClient) error {
	switch r := rdb.(type) {
	case nil:
		return errors.New("nil redis client")
	case *redis.Client:
		if r == nil {
			return errors.New("nil *redis.Client")
		}
	case *redis.ClusterClient:
		if r == nil {
			return errors.New("nil *redis.ClusterClient")
		}
	case *redis.Ring:
		return errors.New("a *redis.Ring is not supported (it shards keys and channels by a hash of its own); use a single node, Sentinel or a Redis Cluster")
	default:
		return fmt.Errorf("a redis client of type %T is not supported: pass a *redis.Client (single node, Sentinel) or a *redis.ClusterClient", rdb)
	}
	return nil
}

// Route returns the route key's calls take: its hash slot on a Cluster,
// 0 where one server serves every key (and on a nil Transport: a zero
// Client's primitives report their own error). Keys of one route are served by
// one primary at a time, and a script's keys must share one.
func (t *Transport) Route(key string) int {
	if t == nil || t.cc == nil {
		return 0
	}
	return keys.Slot(key)
}

// IsCluster reports whether rdb is a Redis Cluster client.
func IsCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// ReadTimeout returns the ReadTimeout of rdb's options, under which
// go-redis reads a pipeline's replies (WAIT's included); ok is false when
// rdb is neither a *redis.Client nor a *redis.ClusterClient, the clients
// whose calls can be followed by WAIT on the connection of their node.
func ReadTimeout(rdb redis.UniversalClient) (d time.Duration, ok bool) {
	switch r := rdb.(type) {
	case *redis.Client:
		return r.Options().ReadTimeout, true
	case *redis.ClusterClient:
		return r.Options().ReadTimeout, true
	}
	return 0, false
}

// Primary says which server is the primary serving a key: ID names it (a
// new ID after a failover, or when a Cluster slot moves to another
// master). Err: not known now (the primary unreachable, or in the middle
// of the switch).
type Primary struct {
	ID  string
	Err error
}

// ErrNotPrimary is ReplID's answer when the server asked is not a primary
// (yet, or any more).
var ErrNotPrimary = errors.New("redisync: the server is not a primary")

// Primaries returns the primary serving each key of ks, in order, for the
// healer of the releases a failover lost (internal/holds/heal.go): one
// INFO replication per primary asked (keys are one per slot). A primary
// is known by its replication id (INFO replication's master_replid),
// which a replica promoted to primary changes; on a Cluster, also by the
// address of the master that serves the key's slot. A Cluster master that
// answers it is no primary has the client reload its slot map.
func (t *Transport) Primaries(ctx context.Context, ks []string) []Primary {
	out := make([]Primary, len(ks))
	if t.cc == nil {
		id, err := ReplID(ctx, t.rdb)
		for i := range out {
			out[i] = Primary{ID: id, Err: err}
		}
		return out
	}
	ids := map[string]Primary{} // by the master's address
	for i, k := range ks {
		node, err := t.cc.MasterForKey(ctx, k)
		if err != nil {
			out[i] = Primary{Err: err}
			continue
		}
		addr := node.Options().Addr
		p, seen := ids[addr]
		if !seen {
			id, err := ReplID(ctx, node)
			if errors.Is(err, ErrNotPrimary) {
				t.cc.ReloadState(ctx) // the slots moved: learn where
			}
			p = Primary{ID: addr + " " + id, Err: err}
			ids[addr] = p
		}
		out[i] = p
	}
	return out
}

// ReplID returns the replication id of the primary rdb talks to, or
// ErrNotPrimary when it is a replica.
func ReplID(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	role, id := "", ""
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "role:"); ok {
			role = v
		} else if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			id = v
		}
	}
	if role != "master" || id == "" {
		return "", ErrNotPrimary
	}
	return id, nil
}
