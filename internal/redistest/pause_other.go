//go:build !unix

package redistest

import "syscall"

// Pause and Resume need job-control signals, which only Unix systems have:
// here sending them fails, so Pause leaves the server running.
const (
	sigStop = syscall.Signal(-1)
	sigCont = syscall.Signal(-1)
)
