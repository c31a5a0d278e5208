package holds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
)

// Ack is WithReplicaAck's setting: K replicas within Timeout; K == 0
// means off.
type Ack struct {
	K       int
	Timeout time.Duration
}

// On reports whether acquisitions wait for replicas.
func (a Ack) On() bool { return a.K > 0 }

// RenewedAck reports whether a renewal's reply is acknowledged: nil without
// WithReplicaAck, or when k replicas acknowledged it.
func (m *Machine) RenewedAck(r reply) error { return m.cfg.Ack.unacked(r, nil) }

// unacked returns a *NotReplicatedError carrying took (the reply of a
// script that took something, or nil for a renewal's) when WAIT was sent
// after r's script and fewer than K replicas acknowledged it, else nil.
func (a Ack) unacked(r reply, took []int64) error {
	if r.Acked >= 0 && (r.WaitErr != nil || r.Acked < int64(a.K)) {
		return &NotReplicatedError{reply: slices.Clone(took), acked: r.Acked, ack: a, err: r.WaitErr}
	}
	return nil
}

// NotReplicatedError reports an acquisition or re-entry that fewer than k
// replicas acknowledged within the timeout. reply is the script's.
type NotReplicatedError struct {
	reply []int64
	acked int64
	ack   Ack
	err   error // WAIT's own error, if it failed
	Undo  error // why undoing the acquisition did not finish, if it did not
}

func (e *NotReplicatedError) Error() string {
	undone := "" // a renewal's
	switch {
	case e.reply == nil:
	case e.Undo == nil:
		undone = "; the acquisition was undone"
	case errors.Is(e.Undo, context.Canceled) || errors.Is(e.Undo, context.DeadlineExceeded):
		undone = "; the acquisition is being undone (the call's context ended first)"
	default:
		undone = fmt.Sprintf("; undoing the acquisition failed (%v): its lease frees it", e.Undo)
	}
	if e.err != nil {
		return fmt.Sprintf("redisync: not replicated: WAIT failed (%v)%s", e.err, undone)
	}
	return fmt.Sprintf("redisync: not replicated: %d of %d replicas acknowledged within %v%s",
		e.acked, e.ack.K, e.ack.Timeout, undone)
}

func (e *NotReplicatedError) Unwrap() []error {
	if e.err != nil {
		return []error{errs.NotReplicated, e.err}
	}
	return []error{errs.NotReplicated}
}

// Count is the owner's hold count after the script that was not
// acknowledged: what undoing a re-entry takes back from.
func (e *NotReplicatedError) Count() int { return int(e.reply[1]) }

// NotReplicated returns err's *NotReplicatedError, or nil.
func NotReplicated(err error) *NotReplicatedError {
	if err == nil {
		return nil // the common case, without errors.As's allocation
	}
	var nr *NotReplicatedError
	if errors.As(err, &nr) {
		return nr
	}
	return nil
}
