package main

import (
	"errors"
	"fmt"
)

// Exit statuses of redisync itself; otherwise it exits with its command's.
const (
	exitFailed      = 1   // an error: Redis unreachable or refusing, a semaphore of another size
	exitUsage       = 64  // bad command line (sysexits' EX_USAGE)
	exitLost        = 70  // the lease was lost while the command ran (EX_SOFTWARE)
	exitNotAcquired = 75  // not acquired within -wait (EX_TEMPFAIL; -conflict-exit-code)
	exitCannotRun   = 126 // the command was found but could not be started (as env(1))
	exitNotFound    = 127 // the command was not found (as env(1))
)

// exitError is an error with the status redisync exits with. A nil err
// exits silently: the command's own status, passed through.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErr is a usage error (exit 64) saying what is wrong.
func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode returns the status redisync exits with for err from run, and
// whether there is a message to print.
func exitCode(err error) (int, bool) {
	var e *exitError
	switch {
	case err == nil:
		return 0, false
	case errors.As(err, &e):
		return e.code, e.err != nil
	}
	return exitFailed, true
}
