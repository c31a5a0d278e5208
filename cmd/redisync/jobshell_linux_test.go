package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A job-control shell for the terminal tests, as small as can be: the test
// binary run again as the leader of a new session whose controlling
// terminal is a pty, doing what an interactive shell does with one job.
// It reads commands on fd 3 and tells what happens on fd 4:
//
//	run ARGV-JSON  start the job in a process group of its own, in the
//	               terminal's foreground    -> started PGID
//	bg ARGV-JSON   the same, in the background (cmd &)   -> started PGID
//	fg             give the job the terminal and continue it (SIGCONT)
//
// and, as the job goes: "stopped SIG" (the shell has taken the terminal
// back), "exited STATUS FG" (FG: the terminal's foreground group at that
// moment, before the shell takes it back).

// jobShellEnv makes the test binary a job-control shell (TestMain).
const jobShellEnv = "REDISYNC_TEST_JOBSHELL"

// asHelper runs the test binary as the job-control shell, or as a
// subreaper that reaps nothing (noreap_linux_test.go), when a test starts
// it so (TestMain).
func asHelper() {
	switch {
	case os.Getenv(jobShellEnv) == "1":
		os.Exit(jobShell())
	case os.Getenv(noReapEnv) == "1":
		os.Exit(noReaper(os.Args[1:]))
	}
}

// jobShell is the shell's main.
func jobShell() int {
	ctl, ev := os.NewFile(3, "ctl"), os.NewFile(4, "events")
	tell := func(format string, args ...any) { fmt.Fprintf(ev, format+"\n", args...) }
	self := syscall.Getpgrp()
	pgid := 0
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "run", "bg":
			var argv []string
			if err := json.Unmarshal([]byte(arg), &argv); err != nil {
				tell("error %v", err)
				continue
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: verb == "run", Ctty: 0}
			if err := cmd.Start(); err != nil {
				tell("error %v", err)
				continue
			}
			pgid = cmd.Process.Pid
			tell("started %d", pgid)
			go func(pid int) {
				for {
					var ws syscall.WaitStatus
					if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err == syscall.EINTR {
						continue
					} else if err != nil {
						tell("error %v", err)
						return
					}
					if ws.Stopped() {
						setForeground(self)
						tell("stopped %d", int(ws.StopSignal()))
						continue
					}
					fg, _ := unix.IoctlGetInt(0, unix.TIOCGPGRP)
					setForeground(self)
					tell("exited %d %d", statusOfWait(ws), fg)
					return
				}
			}(pgid)
		case "fg":
			setForeground(pgid)
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
		}
	}
	return 0
}

// setForeground makes pgid the terminal's foreground group, with SIGTTOU
// blocked in this thread (as a shell does): the shell's group may be in
// the background. Blocked, not ignored: an ignored signal would be
// inherited by the next job.
func setForeground(pgid int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[(unix.SIGTTOU-1)/64] |= 1 << ((uint(unix.SIGTTOU) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, pgid)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
}

func statusOfWait(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
