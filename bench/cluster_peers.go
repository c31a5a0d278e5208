package main

import (
	"fmt"
	"time"
)

// ---------------------------------------------------------------------------
// Cluster peers (issue 34): on a private 3-master Cluster, every library's
// uncontended pair (one goroutine, one client, one lock) and its release →
// waiter in another client, measured as sections 1 and 3 measure them on the
// single node: interleaved rounds, a fresh lock name per round (on whichever
// master owns it), Redis's commands and CPU summed over the masters. Every
// client is a cluster client: go-redis ClusterClient for redisync, redsync
// (goredis.NewPool takes a UniversalClient), redislock (it takes a
// redis.Scripter) and the full-duplex yardstick (ClusterClient's own
// auto-pipeline); rueidis detects the cluster. Over -latency every master has
// its own proxy (link.go), as in many-cluster.

// clusterEnv is an env of the Cluster cl: the libraries dial cl's masters
// (through e's link), the yardstick dials the first master, Redis's stats
// are summed over the masters.
func (e *env) clusterEnv(cl *benchCluster) *env {
	return &env{addr: cl.nodes[0].addr, addrs: cl.addrs(), admin: e.admin, admins: cl.admins, warm: e.warm, rounds: e.rounds, link: e.link}
}

func (r *report) clusterPeers(bin string) error {
	cl, err := startCluster(bin, 3)
	if err != nil {
		return err
	}
	defer cl.stop()
	ce := r.e.clusterEnv(cl)

	r.clUnc = map[string]*loadRes{yardName: {}}
	for _, l := range r.libs {
		r.clUnc[l.name] = &loadRes{}
	}
	cfg := loadCfg{goroutines: 1, clients: 1, sameLock: true}
	for round := range ce.rounds {
		progress("cluster peers: uncontended round %d/%d", round+1, ce.rounds)
		for _, l := range r.libs {
			// the yardstick runs next to every library, so drift hits both alike
			if err := ce.yardstick(r.perRound()/2, r.clUnc[yardName]); err != nil {
				return err
			}
			if err := ce.load(l, cfg, r.perRound(), r.clUnc[l.name]); err != nil {
				return fmt.Errorf("uncontended: %s: %w", l.name, err)
			}
		}
	}

	r.clHand = map[string]*handoffRes{}
	for _, l := range r.libs {
		r.clHand[l.name] = &handoffRes{}
	}
	const maxSamples = 400
	for round := range ce.rounds {
		progress("cluster peers: handoff round %d/%d", round+1, ce.rounds)
		for _, l := range r.libs {
			a := r.clHand[l.name]
			if a.failed != nil {
				continue
			}
			if err := ce.handoff(l, r.perRound(), maxSamples/ce.rounds, a); err != nil {
				a.failed = err // the row's, not the run's
				progress("cluster peers: handoff: %s: %v (in its row; the run goes on)", l.name, err)
			}
		}
	}
	r.printClusterPeers()
	return nil
}

// bestOf returns the highest pairs/s among names in res, and its row.
func bestOf(res map[string]*loadRes, names []string) (float64, string) {
	best, bestName := 0.0, ""
	for _, n := range names {
		if b := rateOf(res[n]); b > best {
			best, bestName = b, n
		}
	}
	return best, bestName
}

func (r *report) printClusterPeers() {
	y := r.clUnc[yardName]
	ys := y.pairs.sorted()
	rtt := ys.pct(50)
	fmt.Printf("## 4c. Cluster peers: uncontended pair and release → waiter on a 3-master Cluster\n\n")
	fmt.Printf("Every library on cluster clients (go-redis `ClusterClient` for redisync, redsync, redislock and the full-duplex yardstick, " +
		"whose auto-pipeline is the ClusterClient's own; rueidis detects the cluster), measured as sections 1 and 3 measure them on the single node, " +
		"the libraries interleaved in rounds, a fresh lock name per round (on whichever master owns it). Redis's commands and CPU are summed over the three masters.\n\n")
	fmt.Printf("### Uncontended: one goroutine, one client, acquire + release of one lock\n\n")
	fmt.Printf("Yardstick (EVALSHA of `return 1` on one connection to the first master, half a slice before every library's): p50 **%s** (p99 %s); "+
		"two-round-trip floor 1/(2 × p50) %s pairs/s.\n\n", fmtDur(rtt), fmtDur(ys.pct(99)), fmtRate(1/(2*rtt.Seconds())))
	best, bestName := bestOf(r.clUnc, peerRows)
	fmt.Printf("*÷ best peer*: ÷ the highest pairs/s of the peers' rows (this table: %s).\n\n", bestName)
	fmt.Println("| library | pairs/s | ÷ best peer | ÷ floor | pair p50 | pair p99 | p50 in round trips | requests/pair | Redis cmds/pair | Redis CPU/pair |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.libs {
		a := r.clUnc[l.name]
		s := a.pairs.sorted()
		rate := rateOf(a)
		vs := "–"
		if best > 0 {
			vs = fmtF(rate/best, 2)
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, fmtRate(rate), vs, fmtF(rate*2*rtt.Seconds(), 2),
			fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtF(float64(s.pct(50))/float64(rtt), 2),
			reqsPerAcq(a.reqs, a.acq), perAcq(a.rs.commands(), a.acq, 1), fmtDur(cpuPer(a.rs.cpu, a.acq)))
	}
	fmt.Println()

	fmt.Printf("### Release → waiter in another client\n\n")
	fmt.Printf("Client 1 holds, client 2's Lock waits; client 1 releases 5–25 ms (random) after client 2 called Lock; the sample runs from the " +
		"release returning to client 2 holding. *Redis CPU per handoff*: everything Redis spent during the measured handoffs, summed over the " +
		"masters, per handoff (both acquisitions, both releases, and a poller's retries).\n\n")
	fmt.Println("| library | samples | p50 | p99 | max | p50 ÷ rueidislock KM1 | p99 ÷ rueidislock KM1 | Redis CPU per handoff |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var b50, b99 time.Duration
	if b := r.clHand[bar]; b != nil && b.failed == nil && len(b.samples) > 0 {
		bs := b.samples.sorted()
		b50, b99 = bs.pct(50), bs.pct(99)
	}
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "–"
		}
		return fmtF(float64(a)/float64(b), 2)
	}
	for _, l := range r.libs {
		a := r.clHand[l.name]
		if a.failed != nil {
			fmt.Printf("| %s | %d | failed: %v | | | | | |\n", l.name, len(a.samples), a.failed)
			continue
		}
		s := a.samples.sorted()
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s |\n", l.name, len(s), fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtDur(s.pct(100)),
			ratio(s.pct(50), b50), ratio(s.pct(99), b99), fmtDur(cpuPer(a.rs.cpu, int64(len(s)))))
	}
	fmt.Println()
}
