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

// waitUntil polls cond until it reports true (true) or d has passed (false).
func waitUntil(d time.Duration, cond func(context.Context) bool) bool {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok := cond(ctx)
		cancel()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// ReplicatedCluster is a Redis Cluster whose masters each have replicas,
// owned by a test.
type ReplicatedCluster struct {
	*Cluster
	// Replicas[i] are the replicas of the shard Masters[i] served when the
	// cluster started. Failover swaps a master with one of its replicas in
	// Masters and Replicas.
	Replicas [][]*Server
}

// StartClusterWithReplicas starts a cluster of masters (3 if masters <= 0)
// as StartCluster does, adds replicasPerMaster replicas to each master
// (CLUSTER REPLICATE), and waits until every replica's link to its master is
// up and every node knows every other. It is stopped when tb's test ends.
func StartClusterWithReplicas(tb testing.TB, masters, replicasPerMaster int) *ReplicatedCluster {
	tb.Helper()
	cl := &ReplicatedCluster{Cluster: StartCluster(tb, masters)}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	first := cl.Masters[0].Client(tb)
	busPort, err := first.ConfigGet(ctx, "cluster-port").Result()
	if err != nil {
		tb.Fatalf("redistest: CONFIG GET cluster-port: %v", err)
	}
	confDir := tb.TempDir()
	for _, m := range cl.Masters {
		mc := m.Client(tb)
		if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			tb.Fatalf("redistest: configure master %s: %v", m.Addr(), err)
		}
		id := NodeID(tb, m)
		var rs []*Server
		for range replicasPerMaster {
			r := start(tb, func(port int) []string {
				return []string{"--cluster-enabled", "yes",
					"--cluster-config-file", filepath.Join(confDir, fmt.Sprintf("nodes-%d.conf", port)),
					"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(freePort(tb))}
			})
			rc := r.Client(tb)
			if err := rc.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", cl.Masters[0].Port(), busPort["cluster-port"]).Err(); err != nil {
				tb.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
			waitFor(tb, "replica "+r.Addr()+" to learn of master "+m.Addr(), func(ctx context.Context) (bool, error) {
				err := rc.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
				return err == nil, err
			})
			waitFor(tb, "replica "+r.Addr()+" link up", func(ctx context.Context) (bool, error) {
				info, err := rc.Info(ctx, "replication").Result()
				return strings.Contains(info, "master_link_status:up"), err
			})
			rs = append(rs, r)
		}
		cl.Replicas = append(cl.Replicas, rs)
		// After a diskless sync, a master streams writes to a new
		// replica only after its first ACK: until then WAIT counts
		// none. Wait until every replica acknowledges a write.
		key := ownKey(ctx, tb, mc)
		waitFor(tb, "master "+m.Addr()+" streaming to its replicas", func(ctx context.Context) (bool, error) {
			p := mc.Pipeline()
			p.Set(ctx, key, 1, 0)
			p.Del(ctx, key)
			w := p.Do(ctx, "wait", len(rs), 100)
			_, _ = p.Exec(ctx)
			n, err := w.Int64()
			return n == int64(len(rs)), err
		})
	}
	want := fmt.Sprintf("cluster_known_nodes:%d\r", len(cl.Masters)*(1+replicasPerMaster))
	for _, s := range cl.all() {
		c := s.Client(tb)
		waitFor(tb, "cluster node "+s.Addr()+" to know every node", func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok\r") && strings.Contains(info, want), err
		})
	}
	return cl
}

// all returns every node, masters first.
func (cl *ReplicatedCluster) all() []*Server {
	all := append([]*Server(nil), cl.Masters...)
	for _, rs := range cl.Replicas {
		all = append(all, rs...)
	}
	return all
}

// NodeID returns s's cluster node id (CLUSTER MYID).
func NodeID(tb testing.TB, s *Server) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	id, err := s.Client(tb).Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr(), err)
	}
	return id
}

// Failover promotes the first replica of shard i with CLUSTER FAILOVER
// (the master agrees, so no write acknowledged before it is lost; with
// force, CLUSTER FAILOVER FORCE, which does not wait for the master to
// catch the replica up), waits until every node sees the replica as the
// master of the shard's slots, swaps the two in Masters and Replicas, and
// returns the new master.
func (cl *ReplicatedCluster) Failover(tb testing.TB, i int, force bool) *Server {
	tb.Helper()
	if force {
		return cl.failover(tb, i, "FORCE")
	}
	return cl.failover(tb, i)
}

// Takeover is Failover with CLUSTER FAILOVER TAKEOVER: the replica takes
// the shard's slots without the agreement of the master or of the other
// masters (it bumps the epoch itself).
func (cl *ReplicatedCluster) Takeover(tb testing.TB, i int) *Server {
	tb.Helper()
	return cl.failover(tb, i, "TAKEOVER")
}

// failover is Failover with CLUSTER FAILOVER's option, if any.
func (cl *ReplicatedCluster) failover(tb testing.TB, i int, option ...any) *Server {
	tb.Helper()
	if len(cl.Replicas[i]) == 0 {
		tb.Fatalf("redistest: shard %d has no replica", i)
	}
	old, r := cl.Masters[i], cl.Replicas[i][0]
	slot := cl.slotOf(tb, old)
	args := append([]any{"CLUSTER", "FAILOVER"}, option...)
	rc := r.Client(tb)
	// A manual failover that does not complete within its own timeout
	// (the replica could not catch up in time on a loaded machine) is
	// abandoned by Redis: ask again.
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		err := rc.Do(ctx, args...).Err()
		cancel()
		if err != nil {
			tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", r.Addr(), err)
		}
		if waitUntil(5*time.Second, func(ctx context.Context) bool {
			role, err := rc.Do(ctx, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		}) {
			break
		}
		if attempt == 2 {
			tb.Fatalf("redistest: %s did not become master after 3 CLUSTER FAILOVERs", r.Addr())
		}
	}
	cl.Masters[i], cl.Replicas[i][0] = r, old
	cl.waitOwner(tb, slot, r)
	return r
}

// slotOf returns a slot that m serves.
func (cl *ReplicatedCluster) slotOf(tb testing.TB, m *Server) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ranges, err := m.Client(tb).ClusterSlots(ctx).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range ranges {
		if len(r.Nodes) > 0 && r.Nodes[0].Addr == m.Addr() {
			return int(r.Start)
		}
	}
	tb.Fatalf("redistest: %s serves no slot", m.Addr())
	return 0
}

// SlotOf returns key's hash slot (CLUSTER KEYSLOT on s).
func SlotOf(tb testing.TB, s *Server, key string) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	n, err := s.Client(tb).Do(ctx, "CLUSTER", "KEYSLOT", key).Int()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
	}
	return n
}

// Owner returns the master that serves slot, as s's CLUSTER SLOTS says.
func (cl *ReplicatedCluster) Owner(tb testing.TB, slot int) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ranges, err := cl.Masters[0].Client(tb).ClusterSlots(ctx).Result()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	for _, r := range ranges {
		if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 {
			for _, s := range cl.all() {
				if s.Addr() == r.Nodes[0].Addr {
					return s
				}
			}
		}
	}
	tb.Fatalf("redistest: no owner of slot %d", slot)
	return nil
}

// waitOwner waits until every node says owner serves slot.
func (cl *ReplicatedCluster) waitOwner(tb testing.TB, slot int, owner *Server) {
	tb.Helper()
	for _, s := range cl.all() {
		c := s.Client(tb)
		waitFor(tb, fmt.Sprintf("node %s to see %s serve slot %d", s.Addr(), owner.Addr(), slot), func(ctx context.Context) (bool, error) {
			ranges, err := c.ClusterSlots(ctx).Result()
			if err != nil {
				return false, err
			}
			for _, r := range ranges {
				if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 {
					return r.Nodes[0].Addr == owner.Addr(), nil
				}
			}
			return false, nil
		})
	}
}

// MigrateSlot moves slot, with its keys, from its master to the master to
// the way redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on
// to, MIGRATING on the owner, MIGRATE of every key, then SETSLOT NODE on
// to, the old owner and every other master; it waits until every node
// agrees.
func (cl *ReplicatedCluster) MigrateSlot(tb testing.TB, slot int, to *Server) {
	tb.Helper()
	if cl.Owner(tb, slot) == to {
		return
	}
	cl.BeginMigration(tb, slot, to).Finish(tb)
}

// Migration is a slot being moved from one master to another, left in
// the middle: the slot is IMPORTING on the target and MIGRATING on the
// source, and its keys move when Move or Finish says.
type Migration struct {
	cl       *ReplicatedCluster
	Slot     int
	From, To *Server
	toID     string
}

// BeginMigration starts moving slot from its master to the master to
// (which must be another master): CLUSTER SETSLOT IMPORTING on to, then
// MIGRATING on the owner. No key moves yet: the owner answers ASK for the
// keys it does not have, and TRYAGAIN for a command on several keys some
// of which it lacks.
func (cl *ReplicatedCluster) BeginMigration(tb testing.TB, slot int, to *Server) *Migration {
	tb.Helper()
	from := cl.Owner(tb, slot)
	if from == to {
		tb.Fatalf("redistest: slot %d is already served by %s", slot, to.Addr())
	}
	m := &Migration{cl: cl, Slot: slot, From: from, To: to, toID: NodeID(tb, to)}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	fromID := NodeID(tb, from)
	m.must(tb, "SETSLOT IMPORTING", to.Client(tb).Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	m.must(tb, "SETSLOT MIGRATING", from.Client(tb).Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err())
	return m
}

func (m *Migration) must(tb testing.TB, what string, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("redistest: %s (slot %d, %s to %s): %v", what, m.Slot, m.From.Addr(), m.To.Addr(), err)
	}
}

// Keys returns the keys of the slot still on the source, at most n.
func (m *Migration) Keys(tb testing.TB, n int) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	keys, err := m.From.Client(tb).ClusterGetKeysInSlot(ctx, m.Slot, n).Result()
	m.must(tb, "GETKEYSINSLOT", err)
	return keys
}

// Move moves keys from the source to the target with one MIGRATE; the
// keys the source no longer has are skipped.
func (m *Migration) Move(tb testing.TB, keys ...string) {
	tb.Helper()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	args := []any{"MIGRATE", "127.0.0.1", m.To.Port(), "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if r, err := m.From.Client(tb).Do(ctx, args...).Text(); r != "NOKEY" {
		m.must(tb, "MIGRATE", err)
	}
}

// Finish moves the keys the source still has, then assigns the slot to
// the target: SETSLOT NODE on the target, the source and every other
// master, and waits until every node agrees.
func (m *Migration) Finish(tb testing.TB) {
	tb.Helper()
	for {
		keys := m.Keys(tb, 100)
		if len(keys) == 0 {
			break
		}
		m.Move(tb, keys...)
	}
	// Now and then (about 1 run in 40 of TestReshardingOnEveryPath) a
	// node, the target itself once, still did not see the target serve
	// the slot after the whole wait: the assignment is sent again (as
	// redis-cli does, SETSLOT NODE is safe to repeat) before giving up.
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		m.must(tb, "SETSLOT NODE (target)", m.To.Client(tb).Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err())
		m.must(tb, "SETSLOT NODE (source)", m.From.Client(tb).Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err())
		for _, o := range m.cl.Masters {
			if o != m.From && o != m.To {
				m.must(tb, "SETSLOT NODE", o.Client(tb).Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err())
			}
		}
		cancel()
		if attempt == 2 {
			m.cl.waitOwner(tb, m.Slot, m.To)
			return
		}
		if m.cl.owned(tb, m.Slot, m.To, 5*time.Second) {
			return
		}
		tb.Logf("redistest: not every node sees %s serve slot %d after 5s: SETSLOT NODE again", m.To.Addr(), m.Slot)
	}
}

// owned reports whether every node says owner serves slot within d.
func (cl *ReplicatedCluster) owned(tb testing.TB, slot int, owner *Server, d time.Duration) bool {
	tb.Helper()
	deadline := time.Now().Add(d)
	for _, s := range cl.all() {
		c := s.Client(tb)
		if !waitUntil(time.Until(deadline), func(ctx context.Context) bool {
			ranges, err := c.ClusterSlots(ctx).Result()
			if err != nil {
				return false
			}
			for _, r := range ranges {
				if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 {
					return r.Nodes[0].Addr == owner.Addr()
				}
			}
			return false
		}) {
			return false
		}
	}
	return true
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
