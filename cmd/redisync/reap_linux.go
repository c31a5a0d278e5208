package main

import "golang.org/x/sys/unix"

// adoptOrphans makes the supervisor a subreaper: the processes the command
// orphans are adopted by it, not by init, and it reaps them. Where init
// reaps nothing (redisync as a container's first process), a dead
// leftover would otherwise stay a zombie in the command's group, which
// redisync would wait for until SIGKILL and then its bound.
func adoptOrphans() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
