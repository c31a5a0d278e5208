// Package errs defines the sentinel errors of redisync below every layer,
// so that each layer can return them and callers match them with
// errors.Is; the root package exports them under their documented names
// (ErrNotAcquired is NotAcquired, and so on). It also reads Redis's error
// replies for what every layer needs to know about them.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// The sentinel errors; the root package documents them.
var (
	NotAcquired   = errors.New("redisync: not acquired")
	NotHeld       = errors.New("redisync: not held by this owner")
	LeaseLost     = errors.New("redisync: lease lost")
	Closed        = errors.New("redisync: client closed")
	Invalid       = errors.New("redisync: invalid argument")
	NotReplicated = errors.New("redisync: not replicated")
	WrongType     = errors.New("redisync: wrong type")
)

// Multi has its own text and matches each of Errs.
type Multi struct {
	Msg  string
	Errs []error
}

func (e *Multi) Error() string   { return e.Msg }
func (e *Multi) Unwrap() []error { return e.Errs }

// Lost is the error of a call through a hold whose lease was lost.
var Lost = &Multi{Msg: "redisync: not held: lease lost", Errs: []error{NotHeld, LeaseLost}}

// ClosedHold is the cause of the contexts of holds ended by Close.
var ClosedHold = &Multi{Msg: "redisync: client closed; lease released", Errs: []error{Closed, LeaseLost}}

// Wait wraps the error that ended a wait: ctx's error when parent ended,
// NotAcquired when only the wait's own bound (TryLockFor) ran out.
func Wait(err error, parent context.Context, bounded bool) error {
	if bounded && parent.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: the wait ran out", NotAcquired)
	}
	return err
}

// NotReady reports an error reply that says Redis did not run the command
// because it is not ready for it now (loading its data after a restart,
// running a long script, its cluster settling, a slot moving: a MOVED or
// ASK left when the client's redirects ran out), rather than refusing the
// command itself: trying again later can succeed.
func NotReady(err error) bool {
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "READONLY", "MOVED ", "ASK "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
