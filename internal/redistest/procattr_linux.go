package redistest

import "syscall"

// ChildProcAttr makes the kernel kill a child process (redis-server, a
// test binary run again) if the test binary dies (e.g. on a test
// timeout), so none is left behind.
func ChildProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
