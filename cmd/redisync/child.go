package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is a command run under a hold.
type child struct {
	argv   []string
	env    []string // added to redisync's own environment
	grace  time.Duration
	stdout io.Writer
	stderr io.Writer
	sigs   <-chan os.Signal // signals to pass on to the child's group
	say    func(format string, args ...any)
}

// outcome is how a child ended.
type outcome struct {
	status int   // its exit status, 128+N when signal N ended it
	lost   error // the hold's cause when the hold ended while it ran; nil otherwise
}

// run starts the child in a process group of its own (one that dies with
// redisync, where the platform allows) and waits for it, passing on the
// signals that arrive on sigs to its group. When hold ends first (the lease
// was lost), the group gets SIGTERM at once and SIGKILL after the grace
// period. The error is for a child that could not be started, with
// env(1)'s status: 127 not found, 126 not runnable.
func (c *child) run(hold context.Context) (outcome, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
	cmd.SysProcAttr = groupAttr()
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return outcome{}, &exitError{code: code, err: fmt.Errorf("cannot run %q: %w", c.argv[0], err)}
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var (
		out     outcome
		lost    = hold.Done()
		killAt  <-chan time.Time
		signals = c.sigs
	)
	for {
		select {
		case <-done:
			out.status = statusOf(cmd.ProcessState)
			return out, nil
		case sig := <-signals:
			signalGroup(cmd.Process, sig)
		case <-lost:
			lost = nil
			out.lost = context.Cause(hold)
			c.say("the hold ended while the command ran (%v): SIGTERM to the command now, SIGKILL in %v", out.lost, c.grace)
			signalGroup(cmd.Process, syscall.SIGTERM)
			t := time.NewTimer(c.grace)
			defer t.Stop()
			killAt = t.C
		case <-killAt:
			killAt = nil
			c.say("the command outlived its grace of %v: SIGKILL", c.grace)
			signalGroup(cmd.Process, syscall.SIGKILL)
		}
	}
}

// statusOf returns a finished process's exit status as a shell reports it:
// 128+N when signal N ended it.
func statusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
