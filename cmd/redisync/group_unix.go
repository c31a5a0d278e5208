//go:build unix && !linux

package main

import "syscall"

// commandAttr is how the supervisor starts the command: as the leader of a
// process group of its own, which redisync and the supervisor signal as a
// whole.
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
