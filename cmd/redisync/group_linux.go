package main

import "syscall"

// commandAttr is how the supervisor starts the command: as the leader of a
// process group of its own, which redisync and the supervisor signal as a
// whole. On Linux the kernel also kills that first process (SIGKILL) if
// the supervisor itself dies; redisync then kills the rest of the group.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
