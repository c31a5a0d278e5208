//go:build unix

package redistest

import "syscall"

// The signals behind Pause and Resume.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)
