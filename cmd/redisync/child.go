package main

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"
)

// child is a command run under a hold. How it runs is the platform's:
// child_unix.go (a supervisor, the whole process group, job control) and
// child_other.go (the direct child only).
type child struct {
	argv   []string
	env    []string // added to redisync's own environment
	grace  time.Duration
	stdout io.Writer
	stderr io.Writer
	sigs   <-chan os.Signal // signals to pass on to the child's group
	say    func(format string, args ...any)
	// held tells whether the hold is still held in Redis (ctx carries
	// the hold); an error when it cannot tell. Asked when redisync is
	// continued (SIGCONT), before the command runs again.
	held func(ctx context.Context) (bool, error)
	// reason says why a hold ended, for a line that names it already.
	reason func(error) string
}

// superviseArg is the first argument that makes redisync the supervisor
// of a command (supervise_unix.go), which redisync starts itself.
const superviseArg = "__redisync_supervise"

// outcome is how a child ended.
type outcome struct {
	status int    // its exit status, 128+N when signal N ended it
	lost   error  // why the hold ended while it ran; nil when it did not
	when   string // when lost: "while the command ran", "while the command was stopped"
}

// statusOf returns a finished process's exit status as a shell reports it:
// 128+N when signal N ended it.
func statusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// lostCause is why hold ended, or nil while it lasts.
func lostCause(hold context.Context) error {
	if hold.Err() == nil {
		return nil
	}
	return context.Cause(hold)
}
