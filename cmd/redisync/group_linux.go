package main

import "syscall"

// groupAttr puts the child in a process group of its own, so that a lost
// lease stops all of it, and makes the kernel kill it (SIGKILL) when
// redisync dies, so that it never runs on without the hold: Redis frees
// the lock when the lease ends, and by then the child is gone. The kernel
// sends it when the thread that started the child ends; Go ends a thread
// only when a goroutine locked to it returns, which redisync never does.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
