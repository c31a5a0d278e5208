package holds

import (
	"cmp"
	"context"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// Undoing what a call took. Both ways below send release scripts, and one
// rule orders them: a script that changes a hold's count sets it (it does
// not add to it), so an undo or give-back of a hold is sent while that
// hold's lock (Hold.Mu) orders it after every script through the hold that
// came before it, and the lock is released only once the undo has
// answered (or its bound, ReleaseTimeout, has passed): an undo landing
// after another goroutine's re-entry through the hold would set the count
// below what that one took (a Semaphore's permits: other owners could then
// take more than the semaphore has), and pipelines of one lane may
// overtake each other (one goes out beside a slow one). Undo sends and
// does not wait, for an attempt that was abandoned, through which nothing
// else goes; UndoNow waits, and releases the hold's lock it is given once
// the undo has answered; GiveBack releases an ended hold, under its lock.

// Undo sends calls, in order and without waiting, to give back what an
// abandoned attempt took or left in Redis: an attempt sent at sent, whose
// script sets a lease of d. Those that reach no server are kept (kept.go)
// and sent again until Redis answers them or that lease would have ended;
// another failure is logged.
func (m *Machine) Undo(sent time.Time, d time.Duration, calls ...call) {
	if sent.IsZero() {
		sent = time.Now() // not known: counted from now, no earlier (a resend is harmless)
	}
	until := lease.Deadline(sent, d)
	// The transport calls then with each reply, in order, from one
	// goroutine: those refused are kept together, in their order.
	var refused []call
	var first error
	n := 0
	m.tr.Async(func(k call, r reply) {
		n++
		if err := r.Err(); err != nil {
			if keptable(err) {
				refused = append(refused, k)
				first = cmp.Or(first, err)
			} else {
				m.log.Warn("redisync: could not give back what an abandoned attempt took; its lease or deadline frees it",
					"script", scriptName(k), "error", err)
			}
		}
		if n == len(calls) && len(refused) > 0 && !m.keepUndo(refused, until, first) {
			m.log.Warn("redisync: could not give back what an abandoned attempt took; its lease or deadline frees it",
				"script", scriptName(refused[0]), "error", first)
		}
	}, calls...)
}

// UndoNow is Undo for a caller that must know the undo done before it goes
// on: a call that fails with errs.NotReplicated, whose promise is that
// what it took was undone when it returns, or a give-back sent under a
// hold's lock. It waits for the replies as long as ctx lasts and at most
// ReleaseTimeout; what it no longer waits for still goes out. With h, the
// undo is of a script sent through h, under h's lock, which the caller
// holds: the lock is released once the undo has answered (at most
// ReleaseTimeout), in the background when ctx ends first. It returns the
// first error: ctx's when it ended first (the undo is on its way), or why
// the undo failed.
func (m *Machine) UndoNow(ctx context.Context, h *lease.Hold, calls ...call) error {
	if h == nil {
		return m.undoWait(ctx, calls)
	}
	done := make(chan error, 1)
	go func() {
		defer h.Mu.Unlock()
		done <- m.undoWait(context.WithoutCancel(ctx), calls)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// undoWait sends calls and waits for their replies, as long as ctx lasts
// and at most ReleaseTimeout (see UndoNow): they are sent in a context of
// their own (ctx's values, no end), so that what the caller no longer
// waits for still goes out, however long a hook holds it back.
func (m *Machine) undoWait(ctx context.Context, calls []call) error {
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		bctx := context.WithoutCancel(ctx)
		var first error
		for i, r := range m.tr.DoAll(bctx, calls) {
			err := r.Err()
			if err != nil && !r.Gone {
				m.log.Warn("redisync: could not give back what an attempt took; its lease or deadline frees it",
					"script", scriptName(calls[i]), "error", err)
			}
			if first == nil {
				first = err
			}
		}
		done <- first
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// scriptName names k's script for the log.
func scriptName(k call) string {
	if k.Script == nil {
		return ""
	}
	return k.Script.Name()
}

// GiveBack releases h in Redis in the background (once the Client is
// closing, at once), bounded by ReleaseTimeout: h ended while Redis may
// still keep it.
func (m *Machine) GiveBack(h *lease.Hold) { m.giveBackFrom(h, false) }

// giveBackFrom is GiveBack for a caller that holds h.Mu when locked.
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
		sent := time.Now()
		if err := m.ReleaseAll(ctx, h.Release); err != nil {
			if m.keep(h, err) {
				return // it reached no server: sent again (kept.go)
			}
			m.log.Warn("redisync: could not release a hold that ended; Redis frees it when its lease ends",
				"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
			return
		}
		m.recorded(h, sent)
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
