//go:build unix && !linux

package main

// adoptOrphans does nothing: subreapers are Linux's (and the orphans'
// init reaps them).
func adoptOrphans() {}
