// Command bench measures redisync's locks side by side with redsync,
// bsm/redislock and rueidislock on a private redis-server it starts on a free
// loopback port (and stops on exit), optionally behind an in-process
// toxiproxy that adds a link latency to every reply (-latency). It prints
// markdown tables to stdout and progress to stderr. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	flagDuration = flag.Duration("duration", 3*time.Second, "measured time per library per configuration (split into -rounds interleaved rounds)")
	flagRounds   = flag.Int("rounds", 3, "interleaved rounds: A B C A B C ...")
	flagScen     = flag.String("scenarios", "uncontended,contended,handoff,order,many,many-cluster,cluster-peers,scale,replica-ack,cluster", "comma-separated scenarios to run")
	flagLibs     = flag.String("libs", "", "comma-separated substrings: run only libraries whose name contains one (default all)")
	flagRedis    = flag.String("redis-server", "", "redis-server binary (default: from PATH, /usr/bin, /usr/sbin)")
	flagWarm     = flag.Duration("warmup", 150*time.Millisecond, "unmeasured warm-up before each measured run")
	flagScaleN   = flag.Int("scale-locks", 10000, "locks held by one client in the watchdog scale test")
	flagScaleW   = flag.Int("scale-waiters", 1000, "locks with a waiter in the pub/sub scale test")
	flagLatency  = flag.String("latency", "0", "link latency added to every reply (toxiproxy in-process, one proxy per Redis node): 0 = loopback; a list such as 0,1ms,5ms runs the scenarios once per value")
	flagManyG    = flag.String("many-goroutines", "4,16,64", "goroutine counts (over 4 clients) of the many-locks scenarios")
)

func main() {
	flag.Parse()
	os.Exit(run())
}

func run() (code int) {
	defer startProfiles()()
	lats, err := parseLatencies(*flagLatency)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	manyG, err := parseGoroutines(*flagManyG)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	bin, err := findRedisServer(*flagRedis)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	srv, err := startRedis(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: start redis-server:", err)
		return 2
	}
	defer srv.stop()
	defer func() {
		if r := recover(); r != nil {
			srv.stop()
			panic(r)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "bench: %v: stopping redis-server\n", s)
		srv.stop()
		os.Exit(130)
	}()

	admin := redis.NewClient(&redis.Options{Addr: srv.addr, ClientName: "bench-admin"})
	defer admin.Close()

	libs := selectLibs(allLibs(), *flagLibs)
	scen := map[string]bool{}
	for _, s := range strings.Split(*flagScen, ",") {
		scen[strings.TrimSpace(s)] = true
	}
	started := time.Now()
	for i, lat := range lats {
		// One pass over the scenarios per link latency, each with its own
		// proxies; the harness's admin client (INFO, CLIENT LIST) goes direct.
		lk := newLink(lat)
		e := &env{addr: srv.addr, admin: admin, warm: *flagWarm, rounds: max(1, *flagRounds), link: lk}
		r := &report{e: e, libs: libs, d: *flagDuration, manyG: manyG}
		if i == 0 {
			r.header(srv, bin, lats)
		}
		if len(lats) > 1 || lk != nil {
			fmt.Printf("# Link: %s\n\n", lk.describe())
		}
		code := r.runSteps(scen, bin)
		lk.close()
		if code != 0 {
			return code
		}
	}
	fmt.Printf("\nTotal run time: %s.\n", time.Since(started).Round(time.Second))
	return 0
}

// runSteps runs the selected scenarios of one pass and its targets.
func (r *report) runSteps(scen map[string]bool, bin string) int {
	steps := []struct {
		name string
		f    func() error
	}{
		{"uncontended", r.uncontended},
		{"contended", r.contended},
		{"handoff", r.handoff},
		{"order", r.order},
		{"many", r.many},
		{"many-cluster", func() error { return r.manyCluster(bin) }},
		{"cluster-peers", func() error { return r.clusterPeers(bin) }},
		{"scale", r.scale},
		{"replica-ack", r.replicaAck},
		{"cluster", func() error { return r.cluster(bin) }},
	}
	if r.e.link != nil {
		progress("== link latency %v", r.e.link.latency)
	}
	for _, s := range steps {
		if !scen[s.name] {
			continue
		}
		progress("== %s", s.name)
		if err := s.f(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.name, err)
			return 1
		}
	}
	r.targets()
	return 0
}

func selectLibs(all []lib, filter string) []lib {
	if filter == "" {
		return all
	}
	var out []lib
	for _, l := range all {
		for _, f := range strings.Split(filter, ",") {
			if f != "" && strings.Contains(strings.ToLower(l.name), strings.ToLower(strings.TrimSpace(f))) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = ", Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d logical CPUs%s", model, runtime.NumCPU(), kernel)
}

func versions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var parts []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/rueidis", "github.com/redis/go-redis/v9":
			parts = append(parts, d.Path+" "+d.Version)
		}
	}
	return strings.Join(parts, ", ")
}

func redisVersion(c *redis.Client) string {
	txt, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(txt, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
