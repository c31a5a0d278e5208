package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

type report struct {
	e    *env
	libs []lib
	d    time.Duration
	// manyG are the goroutine counts of the many-locks scenarios.
	manyG []int

	rtt                     time.Duration // yardstick: EVALSHA p50
	hotRTT                  time.Duration // yardstick measured next to the handoff slices
	unc                     map[string]*loadRes
	cont                    map[string]map[string]*loadRes // config label -> lib -> result
	hand                    map[string]*handoffRes
	ord                     map[string]*orderRes
	wd                      []watchdogRes
	ps                      []pubsubRes
	contOrder               []string
	manyRes, manyClusterRes map[int]map[string]*loadRes // many locks by goroutines: single node, Cluster
	clUnc                   map[string]*loadRes         // cluster-peers: uncontended on the Cluster
	clHand                  map[string]*handoffRes      // cluster-peers: release → waiter on the Cluster
}

const (
	yardName = "yardstick: EVALSHA `return 1`, 1 connection"
	bar      = "rueidislock (KeyMajority 1)"
	ours     = "redisync Mutex"
	fdName   = "redislock (FD autopipeline)" // a yardstick: bsm/redislock over go-redis's full-duplex AutoPipeline
	oursFair = "redisync FairMutex"
)

func (r *report) header(srv *redisServer, bin string, lats []time.Duration) {
	fmt.Printf("# redisync benchmarks\n\n")
	fmt.Printf("- Date: %s\n", time.Now().Format("2006-01-02 15:04 MST"))
	fmt.Printf("- Machine: %s; Go %s, GOMAXPROCS %d\n", machine(), strings.TrimPrefix(goVersion(), "go"), goMaxProcs())
	fmt.Printf("- Redis: %s (%s), private instance on %s, loopback, no persistence\n", redisVersion(r.e.admin), bin, srv.addr)
	var links []string
	for _, l := range lats {
		links = append(links, linkText(l))
	}
	fmt.Printf("- Link: %s\n", strings.Join(links, "; then "))
	fmt.Printf("- Peers: %s\n", versions())
	fmt.Printf("- Command: `%s`\n", strings.Join(append([]string{"go run ."}, os.Args[1:]...), " "))
	fmt.Printf("- Each library runs %v per configuration, as %d interleaved rounds (A B C … A B C …) in this one process run; each round makes fresh clients and a fresh lock name and is preceded by an unmeasured %v warm-up.\n",
		r.d, r.e.rounds, r.e.warm)
	fmt.Println()
}

func (r *report) perRound() time.Duration { return r.d / time.Duration(r.e.rounds) }

// ---- 1. uncontended ----

func (r *report) uncontended() error {
	r.unc = map[string]*loadRes{yardName: {}}
	for _, l := range r.libs {
		r.unc[l.name] = &loadRes{}
	}
	cfg := loadCfg{goroutines: 1, clients: 1, sameLock: true}
	for round := range r.e.rounds {
		progress("uncontended round %d/%d", round+1, r.e.rounds)
		for _, l := range r.libs {
			// the yardstick runs next to every library, so drift hits both alike
			if err := r.e.yardstick(r.perRound()/2, r.unc[yardName]); err != nil {
				return err
			}
			if err := r.e.load(l, cfg, r.perRound(), r.unc[l.name]); err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
		}
	}
	y := r.unc[yardName]
	ys := y.pairs.sorted()
	r.rtt = ys.pct(50)
	floor := 1 / (2 * r.rtt.Seconds())
	fmt.Printf("## 1. Uncontended: one goroutine, one client, acquire + release of one lock\n\n")
	fmt.Printf("The yardstick (a go-redis client with one connection running EVALSHA of `return 1`) runs for half a slice just before every library's slice.\n\n")
	yrate := float64(y.acq) / y.elapsed.Seconds()
	fmt.Printf("Yardstick: one EVALSHA round trip p50 **%s** (p99 %s, %s/s on one connection). Two-round-trip floor 1/(2 × p50): **%s pairs/s** "+
		"(the target's). From the yardstick's mean instead: %s pairs/s (*÷ mean floor*).\n\n",
		fmtDur(r.rtt), fmtDur(ys.pct(99)), fmtRate(yrate), fmtRate(floor), fmtRate(yrate/2))
	fmt.Println("| library | pairs/s | ÷ floor | ÷ mean floor | pair p50 | pair p99 | p50 in round trips | requests/pair | Redis cmds/pair | Redis CPU/pair |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.libs {
		a := r.unc[l.name]
		s := a.pairs.sorted()
		rate := float64(a.acq) / a.elapsed.Seconds()
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.name, fmtRate(rate), fmtF(rate/floor, 2), fmtF(rate/(yrate/2), 2),
			fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtF(float64(s.pct(50))/float64(r.rtt), 2),
			reqsPerAcq(a.reqs, a.acq), perAcq(a.rs.commands(), a.acq, 1), fmtDur(cpuPer(a.rs.cpu, a.acq)))
	}
	fmt.Println()
	return nil
}

// reqsPerAcq is perAcq for the requests a client's hooks counted: "–"
// when none were (redisync's calls go on connections of its own, which the
// go-redis client's hooks do not see; its Redis commands per pair stand).
func reqsPerAcq(n, acq int64) string {
	if n == 0 {
		return "–"
	}
	return perAcq(n, acq, 2)
}

func perAcq(n, acq int64, prec int) string {
	if acq == 0 {
		return "–"
	}
	return fmtF(float64(n)/float64(acq), prec)
}

func cpuPer(cpu time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return cpu / time.Duration(n)
}

// ---- 2. contended ----

func contLabel(c loadCfg) string {
	return fmt.Sprintf("%d goroutines over %d clients, hold %v", c.goroutines, c.clients, c.hold)
}

func (r *report) contended() error {
	if r.rtt == 0 {
		if err := r.measureRTT(); err != nil {
			return err
		}
	}
	r.cont = map[string]map[string]*loadRes{}
	var cfgs []loadCfg
	for _, g := range []int{8, 64} {
		for _, h := range []time.Duration{0, time.Millisecond} {
			cfgs = append(cfgs, loadCfg{goroutines: g, clients: 4, hold: h, sameLock: true})
		}
	}
	fmt.Printf("## 2. Contended: one lock, goroutines spread over 4 clients\n\n")
	fmt.Printf("*changes/s*: acquisitions by a different goroutine than the previous holder. *wait*: from calling Lock to holding. " +
		"*per-goroutine* and *Jain*: acquisitions per goroutine, worst round. *overtakes*: acquisitions made while another goroutine " +
		"had called Lock more than 5 ms earlier and was still waiting. *requests*: client requests counted by a go-redis hook " +
		"(rueidis: by a wrapper; rueidis pipelines concurrent requests on one connection). *Redis cmds*: `INFO commandstats` " +
		"(counts the commands scripts run inside). *Redis CPU*: `INFO cpu` used_cpu_sys + used_cpu_user. " +
		"*errors*: a peer's Lock gave up (tries or TTL exhausted) and the goroutine called it again, wait still counted from the first call. " +
		"*exclusion*: overlapping holders seen / non-atomic counter ≠ acquisitions (must be 0 / ok). " +
		"*client changes/s*: acquisitions by a goroutine of another client than the previous holder's. " +
		"*longest run*: most acquisitions in a row by goroutines of one client (for redisync, mostly cohort handoffs).\n\n")
	for _, cfg := range cfgs {
		label := contLabel(cfg)
		r.contOrder = append(r.contOrder, label)
		res := map[string]*loadRes{}
		for _, l := range r.libs {
			res[l.name] = &loadRes{}
		}
		r.cont[label] = res
		for round := range r.e.rounds {
			progress("contended %s round %d/%d", label, round+1, r.e.rounds)
			for _, l := range r.libs {
				if err := r.e.load(l, cfg, r.perRound(), res[l.name]); err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
			}
		}
		var barRate float64
		if b := res[bar]; b != nil && b.elapsed > 0 {
			barRate = float64(b.handoffs) / b.elapsed.Seconds()
		}
		fmt.Printf("### %s\n\n", label)
		fmt.Println("| library | acq/s | changes/s | ÷ rueidislock KM1 | wait p50 | wait p99 | wait max | per-goroutine min–max | Jain | overtakes | requests/acq | Redis cmds/acq | Redis CPU/acq | Redis CPU/change | client changes/s | longest run | errors | exclusion |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
		for _, l := range r.libs {
			a := res[l.name]
			s := a.waits.sorted()
			rate := float64(a.acq) / a.elapsed.Seconds()
			ch := float64(a.handoffs) / a.elapsed.Seconds()
			vs := "–"
			if barRate > 0 {
				vs = fmtF(ch/barRate, 2)
			}
			excl := fmt.Sprintf("%d / ok", a.overlaps)
			if a.counterBad > 0 {
				excl = fmt.Sprintf("%d / **BROKEN in %d rounds**", a.overlaps, a.counterBad)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %d–%d | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n",
				l.name, fmtRate(rate), fmtRate(ch), vs, fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtDur(s.pct(100)),
				a.minPerG, a.maxPerG, fmtF(a.jainMin, 3), pct(a.overtakes, a.acq),
				reqsPerAcq(a.reqs, a.acq), perAcq(a.rs.commands(), a.acq, 1),
				fmtDur(cpuPer(a.rs.cpu, a.acq)), fmtDur(cpuPer(a.rs.cpu, a.handoffs)),
				fmtRate(float64(a.clientChanges)/a.elapsed.Seconds()), a.longestRun, a.errs, excl)
		}
		fmt.Println()
	}
	return nil
}

func pct(n, of int64) string {
	if of == 0 {
		return "–"
	}
	return fmtF(100*float64(n)/float64(of), 1) + "%"
}

func (r *report) measureRTT() error {
	var y loadRes
	if err := r.e.yardstick(time.Second, &y); err != nil {
		return err
	}
	r.rtt = y.pairs.sorted().pct(50)
	fmt.Printf("Yardstick: one EVALSHA round trip p50 **%s**.\n\n", fmtDur(r.rtt))
	return nil
}

// ---- 3. handoff ----

func (r *report) handoff() error {
	if r.rtt == 0 {
		if err := r.measureRTT(); err != nil {
			return err
		}
	}
	r.hand = map[string]*handoffRes{}
	for _, l := range r.libs {
		r.hand[l.name] = &handoffRes{}
	}
	const maxSamples = 400
	var hot loadRes
	var floor handoffRes
	for round := range r.e.rounds {
		progress("handoff round %d/%d", round+1, r.e.rounds)
		if err := r.e.pubsubFloor(r.perRound()/2, maxSamples/r.e.rounds, &floor); err != nil {
			return err
		}
		for _, l := range r.libs {
			// the yardstick runs next to every library's slice
			if err := r.e.yardstick(r.perRound()/10, &hot); err != nil {
				return err
			}
			a := r.hand[l.name]
			if a.failed != nil {
				continue
			}
			if err := r.e.handoff(l, r.perRound(), maxSamples/r.e.rounds, a); err != nil {
				// One library's failure is its row's, not the run's.
				a.failed = err
				progress("handoff: %s: %v (in its row; the run goes on)", l.name, err)
			}
		}
	}
	r.hotRTT = hot.pairs.sorted().pct(50)
	fmt.Printf("## 3. Handoff latency: holder (client 1) releases while one waiter (client 2) waits\n\n")
	fmt.Printf("From the release returning to the waiter holding. The release comes 5–25 ms (random) after the waiter called Lock. "+
		"The EVALSHA round-trip yardstick ran next to every library's slice: p50 **%s**. The last row is not a lock: it is the floor of "+
		"any design that wakes a waiter through a go-redis subscription (a script PUBLISHes; the subscriber's goroutine, blocked in "+
		"Receive, gets the message and runs one EVALSHA).\n\n", fmtDur(r.hotRTT))
	fmt.Println("| library | samples | p50 | p99 | max | p50 in round trips |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	row := func(name string, a *handoffRes) {
		if a.failed != nil {
			fmt.Printf("| %s | %d | failed: %v | | | |\n", name, len(a.samples), a.failed)
			return
		}
		s := a.samples.sorted()
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", name, len(s), fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtDur(s.pct(100)),
			fmtF(float64(s.pct(50))/float64(r.hotRTT), 1))
	}
	for _, l := range r.libs {
		row(l.name, r.hand[l.name])
	}
	row("floor: PUBLISH → go-redis Receive → EVALSHA", &floor)
	fmt.Println()
	return nil
}

// ---- order ----

func (r *report) order() error {
	r.ord = map[string]*orderRes{}
	for _, l := range r.libs {
		r.ord[l.name] = &orderRes{}
	}
	for round := range r.e.rounds {
		progress("order round %d/%d", round+1, r.e.rounds)
		for _, l := range r.libs {
			if err := r.e.order(l, r.perRound()/2, r.ord[l.name]); err != nil {
				return fmt.Errorf("%s: %w", l.name, err)
			}
		}
	}
	fmt.Printf("## 3b. Arrival order: 8 waiters over 4 clients call Lock 5 ms apart while the lock is held, then it is released\n\n")
	fmt.Println("| library | rounds | rounds granted in strict arrival order | inversions / pairs |")
	fmt.Println("|---|---:|---:|---:|")
	for _, l := range r.libs {
		a := r.ord[l.name]
		fmt.Printf("| %s | %d | %d | %d / %d |\n", l.name, a.rounds, a.perfect, a.inversions, a.maxInversions)
	}
	fmt.Println()
	return nil
}

// ---- 5. scale ----

func (r *report) scale() error {
	n := *flagScaleN
	progress("scale: watchdog, %d locks", n)
	wd, err := r.e.watchdogRedisync(n, 3200*time.Millisecond)
	if err != nil {
		return err
	}
	r.wd = append(r.wd, wd)
	if r.has(bar) {
		for _, noloop := range []bool{false, true} {
			progress("scale: rueidislock renewals, %d locks, NoLoopTracking %v", n, noloop)
			w2, err := r.e.watchdogRueidislock(n, 4*time.Second, noloop)
			if err != nil {
				return err
			}
			r.wd = append(r.wd, w2)
		}
	}
	fmt.Printf("## 5. Scale of the machinery\n\n")
	fmt.Printf("### %d locks held by one client: lease renewal\n\n", n)
	fmt.Printf("redisync: `WithWatchdogTimeout(3s)`, so a tick every 1 s; round trips counted by a go-redis hook (one per pipeline, one per command), over %s. "+
		"rueidislock: KeyMajority 1, KeyValidity 3 s (extended every 1.5 s, one script per lock); requests counted by a wrapper, measured over 4 s after the first extension.\n\n", "3.2 s")
	fmt.Println("| library | window | round trips (requests)/s | per tick | pipelines/tick | commands/tick | tick wall time | Redis CPU per second held | leases lost | note |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, w := range r.wd {
		tick, pipes, tt := fmtF(w.reqsPerTick, 1), fmtF(w.pipesPerTick, 1), fmtDur(w.tickTime)
		if !strings.HasPrefix(w.lib, "redisync") {
			pipes, tt = "–", "–"
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", w.lib, fmtDur(w.window), fmtRate(w.reqsPerSec), tick, pipes,
			fmtF(w.cmdsPerTick, 0), tt, fmtDur(w.cpuPerSec), w.lost, w.note)
	}
	fmt.Println()

	m := *flagScaleW
	fmt.Printf("### %d locks with a waiter each, all waiters in one client\n\n", m)
	fmt.Println("| library | waiters | connections of the waiting client | of them subscribed | channels subscribed | all woken and holding after | acquired |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.libs {
		if !strings.HasPrefix(l.name, "redisync") && l.name != bar {
			continue // the pollers use no subscription
		}
		progress("scale: pub/sub, %d waiters, %s", m, l.name)
		p, err := r.e.pubsubScale(l, m)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		r.ps = append(r.ps, p)
		fmt.Printf("| %s | %d | %d | %d | %d | %s | %d |\n", p.lib, p.waiters, p.conns, p.subConns, p.chans, fmtDur(p.wakeAll), p.acquired)
	}
	fmt.Println()
	return nil
}

func (r *report) has(name string) bool {
	for _, l := range r.libs {
		if l.name == name {
			return true
		}
	}
	return false
}
