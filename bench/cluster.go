package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// ---------------------------------------------------------------------------
// Cluster: redisync's Mutex handoff on a 3-master Redis Cluster (sharded
// pub/sub, as AUTO picks on Redis 7, and classic pub/sub forced) next to the
// same handoff on the single node, interleaved in one run; locks on every
// shard in turn; Redis CPU summed over the nodes.

// benchCluster is a private 3-master cluster.
type benchCluster struct {
	nodes  []*redisServer
	admins []*redis.Client
}

func startCluster(bin string, masters int) (*benchCluster, error) {
	cl := &benchCluster{}
	bus := make([]int, masters)
	for i := range masters {
		p, err := freePort()
		if err != nil {
			cl.stop()
			return nil, err
		}
		bus[i] = p
		s, err := startRedis(bin, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(p), "--cluster-node-timeout", "2000")
		if err != nil {
			cl.stop()
			return nil, err
		}
		cl.nodes = append(cl.nodes, s)
		cl.admins = append(cl.admins, redis.NewClient(&redis.Options{Addr: s.addr, ClientName: "bench-admin"}))
	}
	ctx := context.Background()
	host, port0, _ := strings.Cut(cl.nodes[0].addr, ":")
	for i, a := range cl.admins {
		if i > 0 {
			if err := a.Do(ctx, "CLUSTER", "MEET", host, port0, bus[0]).Err(); err != nil {
				cl.stop()
				return nil, err
			}
		}
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			cl.stop()
			return nil, err
		}
	}
	want := fmt.Sprintf("cluster_known_nodes:%d\r", masters)
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range cl.admins {
		for {
			info, _ := a.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok\r") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				cl.stop()
				return nil, fmt.Errorf("cluster not ready: %s", info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return cl, nil
}

func (cl *benchCluster) addrs() []string {
	var a []string
	for _, n := range cl.nodes {
		a = append(a, n.addr)
	}
	return a
}

func (cl *benchCluster) stop() {
	for _, a := range cl.admins {
		_ = a.Close()
	}
	for _, n := range cl.nodes {
		n.stop()
	}
}

// cpu sums used_cpu_sys + used_cpu_user over the nodes.
func (cl *benchCluster) cpu() time.Duration {
	var t time.Duration
	for _, a := range cl.admins {
		s, err := readRedisStats(context.Background(), a)
		if err != nil {
			panic(fmt.Sprintf("INFO: %v", err))
		}
		t += s.cpu
	}
	return t
}

// clusterRow accumulates one configuration's handoffs.
type clusterRow struct {
	samples durations
	perNode map[string]durations // by the address of the node owning the lock
	cpu     time.Duration
}

// mutexHandoff measures handoffs between two redisync Clients (on rdbs made
// by mk) over names in turn, like e.handoff: the holder releases 5–25 ms
// after the waiter called Lock; the sample runs from the release returning
// to the waiter holding. owner names the node of a name (for per-shard
// rows); cpu reads Redis's CPU.
func mutexHandoff(mk func() redis.UniversalClient, opts []redisync.Option, names []string, owner func(string) string,
	cpu func() time.Duration, d time.Duration, maxN int, acc *clusterRow) error {
	var cs []*redisync.Client
	for range 2 {
		rdb := mk()
		defer rdb.Close()
		c, err := redisync.New(rdb, opts...)
		if err != nil {
			return err
		}
		defer c.Close()
		cs = append(cs, c)
	}
	ctx := context.Background()
	for _, name := range names { // warm up: connections, scripts, subscriptions
		for _, c := range cs {
			h, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				return err
			}
			_ = c.Mutex(name).Unlock(h)
		}
	}
	c0 := cpu()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end) && n < maxN; n++ {
		name := names[n%len(names)]
		h, w := cs[0].Mutex(name), cs[1].Mutex(name)
		hctx, err := h.Lock(ctx)
		if err != nil {
			return err
		}
		got, done := make(chan time.Time, 1), make(chan error, 1)
		go func() {
			wctx, err := w.Lock(ctx)
			got <- time.Now()
			if err == nil {
				err = w.Unlock(wctx)
			}
			done <- err
		}()
		time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
		if err := h.Unlock(hctx); err != nil {
			return err
		}
		t0 := time.Now()
		select {
		case t1 := <-got:
			acc.samples = append(acc.samples, t1.Sub(t0))
			acc.perNode[owner(name)] = append(acc.perNode[owner(name)], t1.Sub(t0))
		case <-time.After(20 * time.Second):
			return fmt.Errorf("waiter not woken after 20s")
		}
		if err := <-done; err != nil {
			return err
		}
	}
	acc.cpu += cpu() - c0
	return nil
}

func (r *report) cluster(bin string) error {
	cl, err := startCluster(bin, 3)
	if err != nil {
		return err
	}
	defer cl.stop()
	probe := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs()})
	defer probe.Close()
	owner := func(name string) string {
		n, err := probe.MasterForKey(context.Background(), name)
		if err != nil {
			return "?"
		}
		return n.Options().Addr
	}
	// Two lock names per shard, taken in turn.
	var names []string
	per := map[string]int{}
	for i := 0; len(names) < 6; i++ {
		name := "bench:cluster:" + strconv.Itoa(i)
		if a := owner(name); per[a] < 2 {
			per[a]++
			names = append(names, name)
		}
	}
	single := []string{"bench:single:1", "bench:single:2"}
	dial := r.e.link.goRedisDialer() // the locks' clients only; probe and INFO go direct
	rows := []struct {
		name  string
		mk    func() redis.UniversalClient
		opts  []redisync.Option
		names []string
		owner func(string) string
		cpu   func() time.Duration
		acc   *clusterRow
	}{
		{"single node (classic)", func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: r.e.addr, Dialer: dial}) }, nil,
			single, func(string) string { return r.e.addr }, func() time.Duration { return r.e.stats().cpu }, nil},
		{"cluster, sharded (AUTO)", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs(), Dialer: dial})
		}, nil,
			names, owner, cl.cpu, nil},
		{"cluster, classic (forced)", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs(), Dialer: dial})
		},
			[]redisync.Option{redisync.WithPubSub(redisync.PubSubClassic)}, names, owner, cl.cpu, nil},
	}
	for i := range rows {
		rows[i].acc = &clusterRow{perNode: map[string]durations{}}
	}
	const maxSamples = 600
	for round := range r.e.rounds {
		progress("cluster round %d/%d", round+1, r.e.rounds)
		for _, row := range rows {
			if err := mutexHandoff(row.mk, row.opts, row.names, row.owner, row.cpu, r.perRound(), maxSamples/r.e.rounds, row.acc); err != nil {
				return fmt.Errorf("%s: %w", row.name, err)
			}
		}
	}
	base := rows[0].acc.samples.sorted().pct(50)
	fmt.Printf("## Cluster: Mutex handoff on a 3-master Redis Cluster next to the single node\n\n")
	fmt.Printf("Measured as in section 3 (release 5–25 ms after the waiter called Lock; from the release returning to the waiter holding), " +
		"redisync clients only, the three configurations interleaved in one run. Cluster locks: two names per master, taken in turn. " +
		"Redis CPU is used_cpu_sys + used_cpu_user summed over every node of the deployment, per handoff (the waiter's acquisition and " +
		"release included).\n\n")
	fmt.Println("| configuration | samples | p50 | p99 | p50 / single node | p50 per shard | Redis CPU per handoff |")
	fmt.Println("|---|---:|---:|---:|---:|---|---:|")
	for _, row := range rows {
		s := row.acc.samples.sorted()
		var shards []string
		for _, n := range row.names {
			a := row.owner(n)
			if strings.Contains(strings.Join(shards, " "), a) {
				continue
			}
			shards = append(shards, a+" "+fmtDur(row.acc.perNode[a].sorted().pct(50)))
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s |\n", row.name, len(s), fmtDur(s.pct(50)), fmtDur(s.pct(99)),
			fmtF(float64(s.pct(50))/float64(base), 2), strings.Join(shards, "; "), fmtDur(cpuPer(row.acc.cpu, int64(len(s)))))
	}
	fmt.Println()
	return nil
}
