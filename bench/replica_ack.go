package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// ---- 7. replica acknowledgement ----

// ackTimeout is WithReplicaAck's timeout in this scenario: a healthy
// replica answers long before it.
const ackTimeout = time.Second

// replicaAck measures what WithReplicaAck(1, …) costs an uncontended
// acquire + release on a primary with one replica: the same Mutex with and
// without the option, interleaved.
func (r *report) replicaAck() error {
	bin, err := findRedisServer(*flagRedis)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(r.e.addr)
	replica, err := startRedis(bin, "--replicaof", host, port)
	if err != nil {
		return fmt.Errorf("start replica: %w", err)
	}
	defer replica.stop()
	if err := waitAcked(r.e.addr); err != nil {
		return err
	}
	libs := []lib{
		{name: ours, new: newRedisync(mutexOf, nil)},
		{name: ours + " + WithReplicaAck(1, 1s)", new: newRedisync(mutexOf, []redisync.Option{redisync.WithReplicaAck(1, ackTimeout)})},
	}
	res := map[string]*loadRes{}
	for _, l := range libs {
		res[l.name] = &loadRes{}
	}
	cfg := loadCfg{goroutines: 1, clients: 1, sameLock: true}
	for round := range r.e.rounds {
		progress("replica-ack round %d/%d", round+1, r.e.rounds)
		for _, l := range libs {
			if err := r.e.load(l, cfg, r.perRound(), res[l.name]); err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
		}
	}
	fmt.Printf("## 7. Replica acknowledgement: uncontended acquire + release, primary with one replica\n\n")
	fmt.Printf("The same Mutex without and with `WithReplicaAck(1, %v)` (WAIT pipelined after the lock script; the release does not wait), interleaved, on the private server with one replica (both on loopback; replication direct, the clients' link: %s).\n\n", ackTimeout, r.e.link.describe())
	fmt.Println("| configuration | pairs/s | pair p50 | pair p99 | requests/pair | Redis cmds/pair | Redis CPU/pair (primary) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, l := range libs {
		a := res[l.name]
		s := a.pairs.sorted()
		rate := float64(a.acq) / a.elapsed.Seconds()
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", l.name, fmtRate(rate), fmtDur(s.pct(50)), fmtDur(s.pct(99)),
			perAcq(a.reqs, a.acq, 2), perAcq(a.rs.commands(), a.acq, 1), fmtDur(cpuPer(a.rs.cpu, a.acq)))
		if a.errs > 0 {
			fmt.Printf("\n%s: %d errors\n", l.name, a.errs)
		}
	}
	fmt.Println()
	return nil
}

// waitAcked waits until the primary at addr counts its replica in WAIT for
// a write (a new replica is streamed to only after its first ACK).
func waitAcked(addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ClientName: "bench-admin"})
	defer rdb.Close()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for {
		p := rdb.Pipeline()
		p.Set(ctx, "bench:ack-probe", 1, 0)
		p.Del(ctx, "bench:ack-probe")
		w := p.Do(ctx, "wait", 1, 100)
		_, _ = p.Exec(ctx)
		if n, _ := w.Int64(); n == 1 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica did not acknowledge within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
