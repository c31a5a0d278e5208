//go:build !unix

package main

import (
	"os"
	"syscall"
)

// groupAttr asks for nothing: process groups and parent-death signals are
// Unix's.
func groupAttr() *syscall.SysProcAttr { return nil }

// signalGroup passes sig to p; where only a kill can be sent, a
// termination signal kills it.
func signalGroup(p *os.Process, sig os.Signal) {
	if p.Signal(sig) != nil && sig != os.Interrupt {
		_ = p.Kill()
	}
}
