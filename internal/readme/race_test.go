//go:build race

package readme

// raceFlags builds the README's blocks with the race detector when the
// test runs with it, so the build reuses the packages the race-enabled
// test run has compiled already.
var raceFlags = []string{"-race"}
