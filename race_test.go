//go:build race

package redisync

// raceFlags builds TestOptionsTyped's programs with the race detector when
// the test runs with it, so the build reuses the packages the race-enabled
// test run has compiled already.
var raceFlags = []string{"-race"}
