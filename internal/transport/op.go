package transport

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// op is one command on its way on one of the engine's connections: its
// bytes, where it stands, and once it is done, what the wire said.
type op struct {
	buf   []byte // its command's bytes, ASKING's before them (skip)
	skip  int    // replies to drop before its own (ASKING's)
	state atomic.Uint32
	// done receives one value when its outcome is set for a caller who
	// waits (buffered 1); nil while nobody waits on it (a caller that
	// writes and reads it itself).
	done chan struct{}
	// gone is called, from a goroutine of its own, with the op once its
	// outcome is set after its caller left (opGone).
	gone func(*op)

	// The outcome.
	v        value
	err      error     // the wire's or the engine's error; nil: v is the reply
	written  bool      // its bytes were written, whole
	answered bool      // Redis answered it (v, or an error reply in v)
	sent     time.Time // when its write began
	pipe     uint64    // which write
	acked    int64     // WAIT's answer for its group; -1: no WAIT
	waitErr  error     // WAIT's own error

	// WithReplicaAck: the group whose WAIT follows it (its reply waits
	// for WAIT's), or, for WAIT itself, the group it answers for.
	ack  *ackGroup
	wait bool
	// batch: the first op of a batch says how many follow it, to be
	// written together whatever the connection's window (room.go).
	batch int
	// unwritten: the write of its bytes failed or was cut before they
	// were all written (set by the writer before the connection fails).
	unwritten bool
	// inWrite: in the write under way, whose writer ends it if the
	// connection fails meanwhile; taken: ended, or being ended, by the
	// reader or the connection's failure. Both under the conn's mu.
	inWrite, taken bool
	// ds is the state of the call it is an attempt of (send's).
	ds *sendState
	// c is the connection it is queued on (its caller leaving before the
	// write uncounts it there).
	c *conn
	// leaveFn, when set, is what its caller leaving does (a proxy of a
	// call the hooks run for: hooks.go).
	leaveFn func() int
	// again: it failed before it was written, on the engine's side (no
	// connection, or its connection failed): it may be sent again.
	again bool
}

// The states of an op.
const (
	opNew     uint32 = iota // made, on no connection yet
	opPending               // queued on a connection, not written
	opWritten               // being written, or written and waiting for its reply
	opDone                  // its outcome is set
	opDropped               // its caller left before it was written: never written
	opGone                  // its caller left after it was written: gone gets it
)

// ackGroup is the calls one WAIT answers for.
type ackGroup struct {
	members []*op
}

// newOp returns an op for a caller who waits on its done.
func newOp() *op {
	o := &op{acked: -1}
	return o
}

// finish ends o with its outcome set: its waiting caller is told, or, when
// its caller left, gone gets it. Only the first finish counts.
func (o *op) finish() {
	for {
		switch st := o.state.Load(); st {
		case opPending, opWritten:
			if o.state.CompareAndSwap(st, opDone) {
				if o.done != nil {
					o.done <- struct{}{}
				}
				return
			}
		case opGone:
			if o.state.CompareAndSwap(opGone, opDone) {
				t := o.c.n.t
				go func() {
					defer t.active.Add(-1) // counted when its caller left
					if o.gone != nil {
						o.gone(o)
					}
				}()
				return
			}
		default:
			return // done, or dropped: nobody to tell
		}
	}
}

// finishPending ends o, queued and not written, with its outcome set, and
// reports whether it did (not when its caller took it back first).
func (o *op) finishPending() bool {
	if !o.state.CompareAndSwap(opPending, opDone) {
		return false
	}
	if o.done != nil {
		o.done <- struct{}{}
	}
	return true
}

// leave is o's caller leaving (its context ended with cause): it reports
// whether o was not written yet (dropped: it never will be) or was (gone:
// its outcome goes to gone), or neither (its outcome was set meanwhile:
// done has it).
func (o *op) leave() (dropped, gone bool) {
	if o.state.CompareAndSwap(opPending, opDropped) {
		o.c.load.Add(-1)
		return true, false
	}
	if o.state.CompareAndSwap(opNew, opDropped) {
		return true, false
	}
	if o.state.CompareAndSwap(opWritten, opGone) {
		o.c.n.t.active.Add(1) // until its outcome is handed on (finish)
		return false, true
	}
	return false, false
}

// ErrNotSent is what the error of a call that was not written wraps (with
// why: its context's error, the connection's): nothing of it ran in Redis,
// nothing is to be given back, and its late is not called.
var ErrNotSent = errors.New("not sent")

// ErrNoReply is what the error of a call written whole whose reply never
// came wraps (with the connection's error): it may have run in Redis or
// not; the engine never sends it again.
var ErrNoReply = errors.New("written, no reply")

// notSent returns the error of a call that was not written: why, and
// cause.
func notSent(cause error, why string) error {
	return fmt.Errorf("redisync: %w (%s): %w", ErrNotSent, why, cause)
}

// noReply returns the error of a call written whose reply did not come.
func noReply(cause error) error {
	return fmt.Errorf("redisync: %w (%s): %w", ErrNoReply, "the connection failed before Redis answered", cause)
}
