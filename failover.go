package redisync

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/holds"
)

// After a failover: which primary serves a key, for the Client's healer
// (internal/holds/heal.go), which sends again the recent releases a new
// primary may not have. A primary is known by its replication id
// (INFO replication's master_replid), which a replica promoted to primary
// changes; on a Cluster, also by the address of the master that serves the
// key's slot.

// errNotPrimary: the server asked is not a primary (yet, or any more).
var errNotPrimary = errors.New("redisync: the server is not a primary")

// primaries returns the primary serving each key (see holds.Primaries):
// one INFO replication per primary asked (keys are one per slot).
func (c *Client) primaries(ctx context.Context, ks []string) []holds.Primary {
	out := make([]holds.Primary, len(ks))
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		id, err := replID(ctx, c.rdb)
		for i := range out {
			out[i] = holds.Primary{ID: id, Err: err}
		}
		return out
	}
	ids := map[string]holds.Primary{} // by the master's address
	for i, k := range ks {
		node, err := cc.MasterForKey(ctx, k)
		if err != nil {
			out[i] = holds.Primary{Err: err}
			continue
		}
		addr := node.Options().Addr
		p, seen := ids[addr]
		if !seen {
			id, err := replID(ctx, node)
			if errors.Is(err, errNotPrimary) {
				cc.ReloadState(ctx) // the slots moved: learn where
			}
			p = holds.Primary{ID: addr + " " + id, Err: err}
			ids[addr] = p
		}
		out[i] = p
	}
	return out
}

// replID returns the replication id of the primary rdb talks to, or
// errNotPrimary when it is a replica.
func replID(ctx context.Context, rdb redis.UniversalClient) (string, error) {
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
		return "", errNotPrimary
	}
	return id, nil
}
