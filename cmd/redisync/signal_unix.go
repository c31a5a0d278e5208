//go:build unix

package main

import (
	"os"
	"syscall"
)

// signalGroup sends sig to the process group that p leads (the child's
// own group), or to p alone if that fails.
func signalGroup(p *os.Process, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && syscall.Kill(-p.Pid, s) == nil {
		return
	}
	_ = p.Signal(sig)
}
