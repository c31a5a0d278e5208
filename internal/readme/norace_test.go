//go:build !race

package readme

// raceFlags: see race_test.go.
var raceFlags []string
