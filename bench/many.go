package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ---- 4. many locks ----
//
// G goroutines over 4 clients, each goroutine acquiring and releasing a lock
// of its own as fast as it can, for every G of -many-goroutines.

// manyRefG is the goroutine count the loopback targets read (the one the
// earlier issues measured at).
const manyRefG = 64

// parseGoroutines reads -many-goroutines: a comma-separated list of counts.
func parseGoroutines(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-many-goroutines: %q: want a positive count", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-many-goroutines: empty")
	}
	return out, nil
}

// runMany measures libs on e at every goroutine count, interleaved per count.
func (r *report) runMany(e *env, libs []lib, what string) (map[int]map[string]*loadRes, error) {
	out := map[int]map[string]*loadRes{}
	for _, g := range r.manyG {
		res := map[string]*loadRes{}
		for _, l := range libs {
			res[l.name] = &loadRes{}
		}
		out[g] = res
		cfg := loadCfg{goroutines: g, clients: 4}
		for round := range e.rounds {
			progress("%s, %d goroutines, round %d/%d", what, g, round+1, e.rounds)
			for _, l := range libs {
				if err := e.load(l, cfg, r.perRound(), res[l.name]); err != nil {
					return nil, fmt.Errorf("%s: %w", l.name, err)
				}
			}
		}
	}
	return out, nil
}

func (r *report) many() error {
	res, err := r.runMany(r.e, r.libs, "many locks")
	if err != nil {
		return err
	}
	r.manyRes = res
	fmt.Printf("## 4. Many locks: goroutines over 4 clients, each on its own lock\n\n")
	r.printMany(r.libs, res)
	return nil
}

// manyCluster is many on a private 3-master Cluster, for redisync and
// rueidislock (KeyMajority 1), Redis's cost summed over the nodes.
func (r *report) manyCluster(bin string) error {
	cl, err := startCluster(bin, 3)
	if err != nil {
		return err
	}
	defer cl.stop()
	ce := &env{addr: r.e.addr, addrs: cl.addrs(), admin: r.e.admin, admins: cl.admins, warm: r.e.warm, rounds: r.e.rounds, link: r.e.link}
	var libs []lib
	for _, l := range r.libs {
		if l.name == ours || l.name == bar {
			libs = append(libs, l)
		}
	}
	res, err := r.runMany(ce, libs, "many locks on a cluster")
	if err != nil {
		return err
	}
	r.manyClusterRes = res
	fmt.Printf("## 4b. Many locks on a 3-master Cluster: goroutines over 4 clients, each on its own lock\n\n")
	fmt.Println("Cluster clients (go-redis ClusterClient; rueidis detects the cluster); Redis's commands and CPU summed over the three masters.")
	fmt.Println()
	r.printMany(libs, res)
	return nil
}

// printMany prints a table per goroutine count and, for more than one, a
// summary of pairs/s and p50 by goroutine count.
func (r *report) printMany(libs []lib, res map[int]map[string]*loadRes) {
	for _, g := range r.manyG {
		fmt.Printf("### %d goroutines over 4 clients\n\n", g)
		fmt.Println("| library | pairs/s | ÷ rueidislock KM1 | pair p50 | pair p99 | requests/pair | Redis cmds/pair | Redis CPU/pair |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
		barRate := rateOf(res[g][bar])
		for _, l := range libs {
			a := res[g][l.name]
			s := a.pairs.sorted()
			rate := rateOf(a)
			vs := "–"
			if barRate > 0 {
				vs = fmtF(rate/barRate, 2)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, fmtRate(rate), vs, fmtDur(s.pct(50)), fmtDur(s.pct(99)),
				reqsPerAcq(a.reqs, a.acq), perAcq(a.rs.commands(), a.acq, 1), fmtDur(cpuPer(a.rs.cpu, a.acq)))
		}
		fmt.Println()
	}
	if len(r.manyG) < 2 {
		return
	}
	fmt.Printf("### By goroutine count: pairs/s (÷ rueidislock KM1), pair p50\n\n")
	head, rule := "| library |", "|---|"
	for _, g := range r.manyG {
		head += fmt.Sprintf(" %d goroutines |", g)
		rule += "---:|"
	}
	fmt.Println(head)
	fmt.Println(rule)
	for _, l := range libs {
		line := "| " + l.name + " |"
		for _, g := range r.manyG {
			a := res[g][l.name]
			vs := ""
			if b := rateOf(res[g][bar]); b > 0 {
				vs = " (" + fmtF(rateOf(a)/b, 2) + "×)"
			}
			line += fmt.Sprintf(" %s%s, %s |", fmtRate(rateOf(a)), vs, fmtDur(a.pairs.sorted().pct(50)))
		}
		fmt.Println(line)
	}
	fmt.Println()
}

// rateOf is acquisitions per second; 0 for a missing or empty result.
func rateOf(a *loadRes) float64 {
	if a == nil || a.elapsed <= 0 {
		return 0
	}
	return float64(a.acq) / a.elapsed.Seconds()
}

// refMany returns the results the loopback targets read: at manyRefG
// goroutines, or at the largest count measured.
func refMany(m map[int]map[string]*loadRes) (int, map[string]*loadRes) {
	if res, ok := m[manyRefG]; ok {
		return manyRefG, res
	}
	g := -1
	for k := range m {
		g = max(g, k)
	}
	return g, m[g]
}
