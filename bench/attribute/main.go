// Command attribute splits a Go profile by layer: each sample goes to the
// innermost frame of a library on its stack (redisync's packages, each on
// its own, or go-redis), so that what a library's code calls (the
// runtime's allocator, its scheduler, a system call) counts for that
// library; a sample with no library frame is "runtime". It reads the
// output of go tool pprof -traces and prints each layer's share, per
// operation when -n says how many the profile ran (issue 45's breakdown):
//
//	go test -run '^$' -bench 'UncontendedPair/node/redisync$' -benchtime 100000x \
//		-cpuprofile cpu.out -o pair.test .
//	go tool pprof -traces -sample_index=cpu pair.test cpu.out | go -C bench run ./attribute -n 100000
//
// For allocations, -memprofile mem.out -memprofilerate 1 and
// -sample_index=alloc_objects; -v lists each layer's innermost functions.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

const (
	core    = "github.com/redisync-go/redisync"
	goRedis = "github.com/redis/go-redis/"
)

// layer names the library frame fn is in, or "" for none.
func layer(fn string) string {
	switch {
	case strings.HasPrefix(fn, core+"/internal/"):
		pkg, _, _ := strings.Cut(strings.TrimPrefix(fn, core+"/internal/"), ".")
		return pkg
	case strings.HasPrefix(fn, core+"/lua."):
		return "lua"
	case strings.HasPrefix(fn, core+"."):
		name := strings.TrimPrefix(fn, core+".")
		if strings.HasPrefix(name, "Benchmark") || strings.HasPrefix(name, "Test") || strings.HasPrefix(name, "bench") {
			return "test"
		}
		return "root"
	case strings.HasPrefix(fn, core+"/"):
		pkg, _, _ := strings.Cut(strings.TrimPrefix(fn, core+"/"), ".")
		return pkg
	case strings.HasPrefix(fn, goRedis):
		return "go-redis"
	}
	return ""
}

// value reads a sample's value: a count, or a time (ns, us, ms, s) in µs.
var valueRE = regexp.MustCompile(`^([0-9.]+)(ns|us|µs|ms|s|)$`)

func value(s string) (float64, bool) {
	m := valueRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	switch m[2] {
	case "ns":
		v /= 1e3
	case "ms":
		v *= 1e3
	case "s":
		v *= 1e6
	}
	return v, true
}

func main() {
	n := flag.Float64("n", 1, "operations the profile ran: figures are per operation")
	verbose := flag.Bool("v", false, "list each layer's innermost functions")
	flag.Parse()
	totals, funcs := attribute(os.Stdin)
	var all float64
	for _, v := range totals {
		all += v
	}
	names := make([]string, 0, len(totals))
	for k := range totals {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp(totals[b], totals[a]) })
	for _, k := range names {
		fmt.Printf("%-12s %10.2f %6.1f%%\n", k, totals[k] / *n, 100*totals[k]/all)
		if *verbose {
			fs := funcs[k]
			keys := make([]string, 0, len(fs))
			for f := range fs {
				keys = append(keys, f)
			}
			slices.SortFunc(keys, func(a, b string) int { return cmp(fs[b], fs[a]) })
			for _, f := range keys[:min(len(keys), 15)] {
				fmt.Printf("    %10.2f %s\n", fs[f] / *n, f)
			}
		}
	}
	fmt.Printf("%-12s %10.2f\n", "all", all / *n)
}

func cmp(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// attribute reads pprof's -traces output: blocks of a value and its
// stack, innermost frame first, between lines of dashes.
func attribute(r io.Reader) (map[string]float64, map[string]map[string]float64) {
	totals := map[string]float64{}
	funcs := map[string]map[string]float64{}
	var val float64
	var have, placed bool
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	place := func(fn string) {
		k := layer(fn)
		if k == "" {
			return
		}
		totals[k] += val
		if funcs[k] == nil {
			funcs[k] = map[string]float64{}
		}
		funcs[k][fn] += val
		placed = true
	}
	end := func() {
		if have && !placed {
			totals["runtime"] += val
		}
		have, placed = false, false
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			end()
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] == "bytes:" {
			continue
		}
		if v, ok := value(fields[0]); ok && len(fields) >= 2 && !have {
			val, have = v, true
			fields = fields[1:]
		}
		if have && !placed {
			place(fields[0])
		}
	}
	end()
	return totals, funcs
}
