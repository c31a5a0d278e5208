//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The controlling terminal, as a shell uses it for job control: the
// command's process group gets the terminal's foreground while it runs
// (so that it can read the terminal, and ^Z and ^C reach it), and
// redisync's group gets it back when the command ends.

// openTTY opens the controlling terminal (whatever stdin is); it fails
// when there is none (cron, a daemon, a pipeline with no terminal).
func openTTY() (*os.File, error) {
	return os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
}

// terminal is redisync's controlling terminal, or nil for none.
type terminal struct{ f *os.File }

// ownTerminal returns the controlling terminal, or nil when there is none.
func ownTerminal() *terminal {
	f, err := openTTY()
	if err != nil {
		return nil
	}
	return &terminal{f: f}
}

// close closes t (nil: nothing).
func (t *terminal) close() {
	if t != nil {
		_ = t.f.Close()
	}
}

// foreground returns the terminal's foreground process group (0 when
// unknown or no terminal).
func (t *terminal) foreground() int {
	if t == nil {
		return 0
	}
	pgid, err := unix.IoctlGetInt(int(t.f.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return 0
	}
	return pgid
}

// ours tells whether redisync's own process group has the terminal's
// foreground: run from an interactive shell, not in the background.
func (t *terminal) ours() bool {
	return t != nil && t.foreground() == syscall.Getpgrp()
}

// give makes pgid the terminal's foreground group, when redisync's group
// has it (a shell's fg, not bg, continued redisync).
func (t *terminal) give(pgid int) {
	if t.ours() {
		_ = unix.IoctlSetPointerInt(int(t.f.Fd()), unix.TIOCSPGRP, pgid)
	}
}

// takeBack gives the terminal's foreground back to redisync's own group
// if pgid (the command's group) still has it. redisync's group is in the
// background then, and a background group that sets the foreground gets
// SIGTTOU unless it ignores it: redisync ignores it from then on. Go's
// signal.Reset would leave it ignored anyway; it is harmless, as redisync
// starts no process afterwards (one would inherit the ignored signal).
func (t *terminal) takeBack(pgid int) {
	if t == nil || t.foreground() != pgid {
		return
	}
	signal.Ignore(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(int(t.f.Fd()), unix.TIOCSPGRP, syscall.Getpgrp())
}
