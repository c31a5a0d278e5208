//go:build unix

package main

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Job control. The command's group has the terminal's foreground, so ^Z
// stops the command, not redisync, and the shell sees nothing stop: the
// shell waits for redisync. So when the command's first process is
// stopped by a terminal's signal, redisync stops its own group too
// (SIGSTOP), and the shell sees the job stopped, as it would have seen
// the command. While stopped, redisync renews nothing; the shell's fg or
// bg continues redisync (SIGCONT) but not the command, and redisync first
// confirms in Redis that it still holds the lock: then it gives the
// command the terminal again (fg) and continues it; if not, it kills the
// stopped group (SIGKILL) and exits as for a lost lease. A command never
// runs again without the lock.

// errNotHeld is why a hold is lost when Redis no longer has it.
var errNotHeld = errors.New("no longer held in Redis")

// confirmPause is how long redisync waits between tries when Redis cannot
// tell whether the hold is still held.
const confirmPause = 100 * time.Millisecond

// jobStop tells whether sig is a terminal's stop (^Z, or a background
// process reading or writing the terminal), which a shell's job control
// handles; a plain SIGSTOP is someone else's.
func jobStop(sig syscall.Signal) bool {
	return sig == syscall.SIGTSTP || sig == syscall.SIGTTIN || sig == syscall.SIGTTOU
}

// stopWith follows a stop of the command's first process by sig: a
// terminal's stop stops redisync's own process group, as it would have
// stopped the command's had it been in it. Without a terminal there is no
// job control to join: the command stays stopped, and redisync holds the
// lock until the command is continued or ends.
func (f *follower) stopWith(sig syscall.Signal) {
	if f.tty == nil || !jobStop(sig) {
		return
	}
	_ = syscall.Kill(0, syscall.SIGSTOP)
}

// confirm starts confirming the hold after a SIGCONT; its answer comes on
// f.resumed.
func (f *follower) confirm() {
	if f.checking {
		return
	}
	f.checking = true
	go func() { f.resumed <- f.confirmHold() }()
}

// confirmHold returns nil if Redis says the hold is still held, and why
// not otherwise. It asks again while Redis cannot tell, until the hold's
// own deadline ends it.
func (f *follower) confirmHold() error {
	for {
		if err := lostCause(f.hold); err != nil {
			return err
		}
		if f.c.held == nil {
			return nil
		}
		ctx, cancel := context.WithTimeout(f.hold, defaultCheck)
		ok, err := f.c.held(ctx)
		cancel()
		switch {
		case err == nil && ok:
			return nil
		case err == nil:
			return errNotHeld
		}
		select {
		case <-f.hold.Done():
		case <-time.After(confirmPause):
		}
	}
}

// resume acts on a confirmation: err is nil when the hold is still held.
func (f *follower) resume(err error) {
	if err != nil {
		if f.out.lost == nil {
			f.out.lost = err
			f.lose()
		}
		return
	}
	if f.stopped && !f.killed && !f.leaderDone {
		f.tty.give(f.pgid)
		f.signal(syscall.SIGCONT)
		f.stopped = false
	}
}
