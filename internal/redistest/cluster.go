package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a replica of master (--replicaof) and waits until its
// replication link is up. To speed up the initial sync it sets the master's
// repl-diskless-sync-delay to 0.
func StartReplica(tb testing.TB, master *Server) *Server {
	tb.Helper()
	mc := redis.NewClient(&redis.Options{Addr: master.Addr()})
	err := mc.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err()
	_ = mc.Close()
	if err != nil {
		tb.Fatalf("redistest: configure master %s: %v", master.Addr(), err)
	}
	s := Start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	c := s.Client(tb)
	waitFor(tb, "replica of "+master.Addr()+" link up", func(ctx context.Context) (bool, error) {
		info, err := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up"), err
	})
	return s
}

// Cluster is a Redis Cluster of masters only (no replicas) owned by a test.
type Cluster struct {
	// Masters are the cluster's nodes, in slot order: Masters[0] serves
	// the lowest slots.
	Masters []*Server
}

// StartCluster starts a Redis Cluster of the given number of masters (3 if
// masters <= 0) with the 16384 slots split evenly between them, waits until
// every node reports cluster_state:ok and knows every other node, and stops
// it when tb's test ends.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters <= 0 {
		masters = 3
	}
	cl := &Cluster{}
	busPorts := make([]int, masters)
	confDir := tb.TempDir()
	for i := range masters {
		cl.Masters = append(cl.Masters, start(tb, func(port int) []string {
			busPorts[i] = freePort(tb) // explicit bus port: port+10000 may exceed 65535
			return []string{"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(confDir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(busPorts[i])}
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	clients := make([]*redis.Client, masters)
	for i, m := range cl.Masters {
		clients[i] = m.Client(tb)
		if i > 0 {
			err := clients[i].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", cl.Masters[0].Port(), busPorts[0]).Err()
			if err != nil {
				tb.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
		}
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d: %v", lo, hi, err)
		}
	}
	want := fmt.Sprintf("cluster_known_nodes:%d\r", masters)
	for i, c := range clients {
		waitFor(tb, "cluster node "+cl.Masters[i].Addr()+" ok", func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok\r") && strings.Contains(info, want), err
		})
	}
	return cl
}

// Addrs returns the "127.0.0.1:port" addresses of the cluster's masters.
func (cl *Cluster) Addrs() []string {
	addrs := make([]string, len(cl.Masters))
	for i, m := range cl.Masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client for the cluster, closed when
// tb's test ends.
func (cl *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls cond until it reports true, failing tb after readyTimeout.
func waitFor(tb testing.TB, what string, cond func(context.Context) (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: timed out waiting for %s (last error: %v)", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
