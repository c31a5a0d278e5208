package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server if the test binary dies
// (e.g. on a test timeout), so no servers are left behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
