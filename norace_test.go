//go:build !race

package redisync

// raceFlags: see race_test.go.
var raceFlags []string
