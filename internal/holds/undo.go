package holds

import (
	"context"

	"github.com/redisync-go/redisync/internal/lease"
)

// Undoing what a call took. Every way below sends release scripts; they
// differ only in how long their caller waits, and one rule orders them: a
// script that changes a hold's count sets it (it does not add to it), so
// an undo or give-back of a hold is sent while that hold's lock (Hold.Mu)
// orders it after every script through the hold that came before it, and
// the lock is released only once the undo has answered (or its bound,
// ReleaseTimeout, has passed). undo sends and does not wait (an attempt
// that was abandoned: nothing else goes through it); undoNow waits,
// bounded; undoUnder is undoNow under the hold's lock, released when the
// undo answers, in the background if the caller leaves first; undoHeld is
// undoNow for a caller that holds the lock itself; giveBack releases an
// ended hold, under its lock when an earlier call still keeps it.

// undo sends calls, in order and without waiting, to give back what an
// abandoned attempt took or left in Redis; a failure is logged.
func (m *Machine) Undo(calls ...call) {
	m.tr.Async(func(k call, r reply) {
		if err := r.Err(); err != nil {
			m.log.Warn("redisync: could not give back what an abandoned attempt took; its lease or deadline frees it",
				"script", scriptName(k), "error", err)
		}
	}, calls...)
}

// undoNow is undo for a caller that must know the undo done before it goes
// on (a call that fails with errs.NotReplicated, whose promise is that what
// it took was undone when it returns; see also undoHeld): it waits for
// the replies, as long as ctx lasts and at most ReleaseTimeout (what it
// no longer waits for still goes out). It returns the first error: ctx's
// when it ended first (the undo is on its way), or why the undo failed.
func (m *Machine) UndoNow(ctx context.Context, calls ...call) error {
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	var first error
	for i, r := range m.tr.DoAll(ctx, calls) {
		err := r.Err()
		if err != nil && !r.Gone {
			m.log.Warn("redisync: could not give back what an attempt took; its lease or deadline frees it",
				"script", scriptName(calls[i]), "error", err)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// undoUnder is undoNow for the undo of a script sent through h, under
// h's lock, which the caller holds: the lock is released once the undo
// has answered (at most ReleaseTimeout), in the background when ctx ends
// first. h's lock serialises the scripts that change the hold because
// they set counts, not add to them: an undo sent after the lock was
// released could land after another goroutine's re-entry through h and
// set the count below what that one took (a Semaphore's permits: other
// owners could then take more than the semaphore has).
func (m *Machine) UndoUnder(ctx context.Context, h *lease.Hold, calls ...call) error {
	done := make(chan error, 1)
	go func() {
		defer h.Mu.Unlock()
		done <- m.UndoNow(context.WithoutCancel(ctx), calls...)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// undoHeld is undo for a give-back sent under a hold's lock (underHold's
// taken): it waits for the replies, at most ReleaseTimeout, so that the
// lock, released after it, orders the give-back before the next script
// through the hold. Those scripts set counts rather than add to them, and
// pipelines of one lane may overtake each other (one goes out beside a
// slow one after laneStall): a give-back landing after another
// goroutine's re-entry would set the count below what that one took.
func (m *Machine) UndoHeld(calls ...call) { _ = m.UndoNow(context.Background(), calls...) }

// scriptName names k's script for the log.
func scriptName(k call) string {
	if k.Script == nil {
		return ""
	}
	return k.Script.Name()
}

// giveBack releases h in Redis in the background (once the Client is
// closing, at once), bounded by ReleaseTimeout: h ended while Redis may
// still keep it.
func (m *Machine) GiveBack(h *lease.Hold) { m.giveBackFrom(h, false) }

// giveBackFrom is giveBack for a caller that holds h.mu when locked.
func (m *Machine) giveBackFrom(h *lease.Hold, locked bool) {
	give := func(lock, wait bool) {
		if lock {
			// In the background, as long as an earlier call through the
			// hold keeps its lock; else at most ReleaseTimeout.
			lctx, cancel := context.Background(), context.CancelFunc(func() {})
			if !wait {
				lctx, cancel = context.WithTimeout(lctx, ReleaseTimeout)
			}
			err := h.Mu.LockCtx(lctx)
			cancel()
			if err != nil {
				m.log.Warn("redisync: could not release a hold that ended, busy with a call that has had no reply; Redis frees it when its lease ends",
					"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
				return
			}
			defer h.Mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		defer cancel()
		if err := m.ReleaseAll(ctx, h.Release); err != nil {
			m.log.Warn("redisync: could not release a hold that ended; Redis frees it when its lease ends",
				"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
		}
	}
	if !m.bgStart() {
		// Closing: Close releases the holds that were live; this one
		// ended before, so it is released here, once, now.
		give(!locked, false)
		return
	}
	go func() {
		defer m.bg.Done()
		give(true, true)
	}()
}
