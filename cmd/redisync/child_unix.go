//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// How long redisync waits, after SIGKILL, for the last processes of the
// command's group to be gone, and how often it looks.
const (
	killBound = 5 * time.Second
	groupPoll = 10 * time.Millisecond
)

// run starts the child through a supervisor (supervise_unix.go) that
// outlives redisync, and follows it until its whole process group has
// ended: the hold covers every process of the command. Signals arriving
// on c.sigs are passed on to the group. When the hold ends first (the
// lease was lost), the group gets SIGTERM at once and SIGKILL after the
// grace period, even once its first process has exited; processes the
// command leaves behind when it exits get the same. When the command is
// stopped at a terminal (^Z), redisync stops too, and when continued it
// confirms its hold before it continues the command: a lost hold kills
// the stopped group (jobctl_unix.go). The error is for a child that could
// not be started, with env(1)'s status: 127 not found, 126 not runnable.
func (c *child) run(hold context.Context) (outcome, error) {
	self, err := selfExe()
	if err != nil {
		return outcome{}, fmt.Errorf("cannot find redisync's own binary to start the supervisor: %w", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return outcome{}, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		_, _ = ctlR.Close(), ctlW.Close()
		return outcome{}, err
	}
	defer evR.Close()
	defer ctlW.Close()
	tty := ownTerminal()
	defer tty.close()
	mode := "bg"
	if tty.ours() {
		mode = "fg"
	}
	sup := exec.Command(self, append([]string{superviseArg, mode, "--"}, c.argv...)...)
	sup.Env = append(os.Environ(), c.env...)
	sup.Stdin, sup.Stdout, sup.Stderr = os.Stdin, c.stdout, c.stderr
	sup.ExtraFiles = []*os.File{ctlR, evW}
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sup.WaitDelay = time.Second // output copied from a pipe: a process that left the group may hold it
	err = sup.Start()
	_, _ = ctlR.Close(), evW.Close()
	if err != nil {
		return outcome{}, fmt.Errorf("cannot start the supervisor: %w", err)
	}
	defer func() {
		_, _ = ctlW.WriteString(ctlDone)
		_ = sup.Wait()
	}()
	events := readEvents(evR)
	first, ok := <-events
	switch {
	case !ok:
		return outcome{}, errors.New("the supervisor ended before it started the command")
	case first.kind == evFail:
		return outcome{}, &exitError{code: first.n, err: errors.New(first.msg)}
	case first.kind != evPid:
		return outcome{}, fmt.Errorf("the supervisor said %q first", first.kind)
	}
	f := &follower{c: c, hold: hold, tty: tty, pgid: first.n, resumed: make(chan error, 1)}
	return f.follow(events)
}

// follower follows the command's process group for run.
type follower struct {
	c    *child
	hold context.Context
	tty  *terminal
	pgid int // the command's process group

	out        outcome
	leaderDone bool        // its first process has exited
	stopped    bool        // its first process is stopped, as the supervisor last said
	checking   bool        // a confirmation of the hold is under way (resume)
	resumed    chan error  // its answer: nil when still held
	killAt     *time.Timer // SIGKILL after the grace, once SIGTERM was sent
	killed     bool        // SIGKILL was sent
}

// follow runs until the command's group is gone.
func (f *follower) follow(events <-chan event) (outcome, error) {
	tstp, cont := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(tstp, syscall.SIGTSTP)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(tstp)
	defer signal.Stop(cont)
	defer func() {
		if f.killAt != nil {
			f.killAt.Stop()
		}
	}()
	var (
		lost   = f.hold.Done()
		poll   <-chan time.Time
		giveUp <-chan time.Time
	)
	for {
		var killAt <-chan time.Time
		if f.killAt != nil && !f.killed {
			killAt = f.killAt.C
		}
		select {
		case ev, ok := <-events:
			if !ok {
				f.signal(syscall.SIGKILL)
				f.tty.takeBack(f.pgid)
				return f.out, errors.New("the supervisor ended unexpectedly: SIGKILL sent to the command's process group")
			}
			switch ev.kind {
			case evStop:
				f.stopped = true
				f.stopWith(syscall.Signal(ev.n))
			case evExit:
				f.out.status, f.leaderDone = ev.n, true
				f.tty.takeBack(f.pgid)
				if f.empty() {
					return f.out, nil
				}
				if f.killAt == nil && !f.killed {
					f.c.say("the command exited (status %d), leaving processes in its group: SIGTERM to them now, SIGKILL in %v", ev.n, f.c.grace)
					f.terminate()
				}
				t := time.NewTicker(groupPoll)
				defer t.Stop()
				poll = t.C
			}
		case sig := <-f.c.sigs:
			f.signal(sig)
		case <-tstp:
			f.signal(syscall.SIGTSTP) // its stop stops redisync (stopWith)
		case <-cont:
			f.confirm()
		case err := <-f.resumed:
			f.checking = false
			f.resume(err)
		case <-lost:
			lost = nil
			if f.out.lost == nil {
				f.out.lost = context.Cause(f.hold)
				f.lose()
			}
		case <-killAt:
			f.c.say("the command's group outlived its grace of %v: SIGKILL", f.c.grace)
			f.kill()
		case <-poll:
			if f.empty() {
				return f.out, nil
			}
		case <-giveUp:
			f.c.say("processes of the command's group %d still exist %v after SIGKILL", f.pgid, killBound)
			return f.out, nil
		}
		if f.killed && giveUp == nil {
			t := time.NewTimer(killBound)
			defer t.Stop()
			giveUp = t.C
		}
	}
}

// lose ends the group for a lost hold (f.out.lost): SIGKILL at once when
// the command is stopped (it never runs again without the hold), SIGTERM
// and SIGKILL after the grace otherwise.
func (f *follower) lose() {
	why := f.c.reason(f.out.lost)
	if f.stopped {
		f.out.when = "while the command was stopped"
		f.c.say("%s %s: SIGKILL to its process group", why, f.out.when)
		f.kill()
		return
	}
	f.out.when = "while the command ran"
	if f.killAt != nil { // already ending leftovers: their grace runs on
		f.c.say("%s %s", why, f.out.when)
		return
	}
	f.c.say("%s %s: SIGTERM to its process group now, SIGKILL in %v", why, f.out.when, f.c.grace)
	f.terminate()
}

// terminate sends SIGTERM to the group and starts the grace.
func (f *follower) terminate() {
	f.signal(syscall.SIGTERM)
	f.killAt = time.NewTimer(f.c.grace)
}

// kill sends SIGKILL to the group.
func (f *follower) kill() {
	f.signal(syscall.SIGKILL)
	f.killed = true
}

// signal sends sig to the command's process group.
func (f *follower) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(-f.pgid, s)
	}
}

// selfExe is the path of redisync's own binary, to start the supervisor
// from. On Linux, a binary removed or replaced since redisync started (an
// upgrade while it waited for the lock) is still there as /proc/self/exe.
func selfExe() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if proc, err := os.Stat("/proc/self/exe"); err == nil {
		if cur, err := os.Stat(self); err != nil || !os.SameFile(proc, cur) {
			return "/proc/self/exe", nil
		}
	}
	return self, nil
}

// empty tells whether no process of the command's group is left. Its ID
// is not reused while any is (POSIX), and is not used once none is.
func (f *follower) empty() bool {
	return errors.Is(syscall.Kill(-f.pgid, 0), syscall.ESRCH)
}
