//go:build unix && !linux

package main

import "syscall"

// groupAttr puts the child in a process group of its own, so that a lost
// lease stops all of it. There is no parent-death signal here: a child of
// a redisync that was killed runs on (and Redis frees the lock at the
// lease's end).
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
