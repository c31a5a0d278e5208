package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Profiles of a run, to see where a library's time goes (issue 34): run
// one library (-libs) and one scenario at a time, as the profile covers
// every measured and unmeasured moment of the run.
var (
	flagCPUProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flagTrace      = flag.String("trace", "", "write a runtime/trace of the whole run to this file")
)

// startProfiles starts what the profile flags ask for, and returns what
// stops them.
func startProfiles() func() {
	var stops []func()
	start := func(path string, begin func(*os.File) error, end func()) {
		if path == "" {
			return
		}
		f, err := os.Create(path)
		if err == nil {
			err = begin(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return
		}
		stops = append(stops, func() { end(); _ = f.Close() })
	}
	start(*flagCPUProfile, func(f *os.File) error { return pprof.StartCPUProfile(f) }, pprof.StopCPUProfile)
	start(*flagTrace, func(f *os.File) error { return trace.Start(f) }, trace.Stop)
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}
