//go:build !unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// run starts the child and waits for it, passing on the signals that
// arrive on sigs. There are no process groups here: a signal, and the end
// of a lost hold (a termination signal at once, a kill after the grace
// period), reach the direct child only, and a redisync that is killed
// leaves it running (Redis frees the lock at the lease's end). The error
// is for a child that could not be started, with env(1)'s status: 127 not
// found, 126 not runnable.
func (c *child) run(hold context.Context) (outcome, error) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, c.stdout, c.stderr
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
		out    outcome
		lost   = hold.Done()
		killAt <-chan time.Time
	)
	for {
		select {
		case <-done:
			out.status = statusOf(cmd.ProcessState)
			return out, nil
		case sig := <-c.sigs:
			if cmd.Process.Signal(sig) != nil && sig != os.Interrupt {
				_ = cmd.Process.Kill()
			}
		case <-lost:
			lost = nil
			out.lost, out.when = context.Cause(hold), "while the command ran"
			c.say("%s while the command ran: terminating it now, killing it in %v", c.reason(out.lost), c.grace)
			if cmd.Process.Signal(os.Interrupt) != nil {
				_ = cmd.Process.Kill()
			}
			t := time.NewTimer(c.grace)
			defer t.Stop()
			killAt = t.C
		case <-killAt:
			killAt = nil
			c.say("the command outlived its grace of %v: killed", c.grace)
			_ = cmd.Process.Kill()
		}
	}
}

// superviseMain is Unix's: there is no supervisor here.
func superviseMain([]string) int { return exitUsage }
