package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCluster is a Redis Cluster whose every master has one replica.
type ReplicatedCluster struct {
	*Cluster
	// Replicas[i] replicates Masters[i].
	Replicas []*Server
}

// StartClusterWithReplicas starts a Redis Cluster of the given number of
// masters (3 if masters <= 0) as StartCluster does, then one replica per
// master, and waits until each replica's link to its master is up and the
// master streams writes to it (WAIT 1 acknowledges a write through it). It
// is stopped when tb's test ends.
func StartClusterWithReplicas(tb testing.TB, masters int) *ReplicatedCluster {
	tb.Helper()
	cl := StartCluster(tb, masters)
	rc := &ReplicatedCluster{Cluster: cl}
	confDir := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	seed := cl.Masters[0].Client(tb)
	seedBus, err := busPort(ctx, seed)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	for _, m := range cl.Masters {
		mc := m.Client(tb)
		if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			tb.Fatalf("redistest: configure master %s: %v", m.Addr(), err)
		}
		id, err := mc.ClusterMyID(ctx).Result()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER MYID: %v", err)
		}
		r := start(tb, func(port int) []string {
			return []string{"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(confDir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(freePort(tb))}
		})
		rc.Replicas = append(rc.Replicas, r)
		c := r.Client(tb)
		if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", cl.Masters[0].Port(), seedBus).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET: %v", err)
		}
		waitFor(tb, "replica "+r.Addr()+" to know its master", func(ctx context.Context) (bool, error) {
			nodes, err := c.ClusterNodes(ctx).Result()
			return strings.Contains(nodes, id), err
		})
		waitFor(tb, "CLUSTER REPLICATE on "+r.Addr(), func(ctx context.Context) (bool, error) {
			err := c.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			return err == nil, nil
		})
		waitFor(tb, "replica "+r.Addr()+" link up", func(ctx context.Context) (bool, error) {
			info, err := c.Info(ctx, "replication").Result()
			return strings.Contains(info, "master_link_status:up"), err
		})
		key := ownKey(ctx, tb, mc)
		waitFor(tb, "master "+m.Addr()+" streaming to its replica", func(ctx context.Context) (bool, error) {
			p := mc.Pipeline()
			p.Set(ctx, key, 1, 0)
			p.Del(ctx, key)
			w := p.Do(ctx, "wait", 1, 100)
			_, _ = p.Exec(ctx)
			n, err := w.Int64()
			return n == 1, err
		})
	}
	for i, m := range cl.Masters {
		c := m.Client(tb)
		want := fmt.Sprintf("cluster_known_nodes:%d\r", 2*len(cl.Masters))
		waitFor(tb, "cluster node "+cl.Masters[i].Addr()+" knows every node", func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok\r") && strings.Contains(info, want), err
		})
	}
	return rc
}

// busPort returns the cluster bus port of the node c is connected to.
func busPort(ctx context.Context, c *redis.Client) (int, error) {
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		_, bus, ok := strings.Cut(f[1], "@")
		if !ok {
			break
		}
		bus, _, _ = strings.Cut(bus, ",")
		return strconv.Atoi(bus)
	}
	return 0, fmt.Errorf("no bus port in CLUSTER NODES: %q", nodes)
}

// ownKey returns a key of one of the slots the master c is connected to
// serves.
func ownKey(ctx context.Context, tb testing.TB, c *redis.Client) string {
	tb.Helper()
	for i := range 10000 {
		key := "redistest:probe:" + strconv.Itoa(i)
		err := c.Get(ctx, key).Err()
		if err == nil || err == redis.Nil {
			return key
		}
		if !strings.HasPrefix(err.Error(), "MOVED") {
			tb.Fatalf("redistest: GET %s: %v", key, err)
		}
	}
	tb.Fatal("redistest: no key of the master's slots found")
	return ""
}
