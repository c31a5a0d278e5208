package holds

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// Release gives up n of the holds that ctx carries (all of them when n is
// its count). send runs the release script with the count before it and
// returns 1 (holds remain), 2 (the last was released, or was already gone
// and the call was written twice: see writes), GoneAt (the last was
// already gone, lost) or 0 (holds that should remain are gone: the lease
// was lost), and when it was sent.
//
// A release returns by the end of the context the hold was taken with
// (h.Parent) at the latest, and within ReleaseTimeout whatever that is.
// Once that context has ended, the hold has ended with it: the release is
// the ended-hold case (afterEnd), and answers nil at once, whether it was
// called after that end or was still waiting for its reply (or for h's
// lock) when the end came; what it could not finish goes on in the
// background (the give-back the end started, and the release's own
// write), and Redis frees the lock at its lease's end at the latest.
//
// A release that does not answer within ReleaseTimeout while that
// context lives (a silent link) returns an error: the last one has ended
// the hold already, and is tried again in the background (Redis frees it
// at its lease's end at the latest); one that is not the last (sent by
// ReleaseBy) keeps h's lock until its reply comes, and is counted then
// (see pending), so that no later script through the hold is overtaken
// by it. A release that cannot have h's lock within ReleaseTimeout (an
// earlier call through the hold keeps it, waiting for its reply) changes
// nothing and returns an error.
func (m *Machine) Release(ctx context.Context, s *Spec, n int, send func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error)) error {
	h := Carried(ctx, s.Ref)
	if h == nil {
		return s.Wrap(fmt.Errorf("%w (the context carries no hold of it)", errs.NotHeld))
	}
	var b *bound // nil: the release's context is the hold's own
	if h.Mu.TryLock() {
		// The common case: the hold's lock free, so the release's
		// context is the hold's own (no allocation, or the one channel
		// of its own it needs when the hold's context can end).
		m.endWithParent(h)
		ctx = h.CallCtx(ctx, ReleaseTimeout)
	} else {
		b = releaseBound(ctx, h)
		defer b.done()
		ctx = b.ctx
		m.endWithParent(h)
		if err := h.Mu.LockCtx(ctx); err != nil {
			if m.endWithParent(h); !h.Live() {
				// Ended, while an earlier call through the hold kept its
				// lock all along the release's bound (the give-back its end
				// started, on a silent link, say): the answer needs nothing
				// from that call, and the release that makes sure Redis does
				// not keep the hold waits for it in the background.
				return m.afterEnd(nil, s, h, false)
			}
			return s.Wrap(fmt.Errorf("redisync: released nothing: the hold is busy with an earlier call whose reply has not come within %v: %w", ReleaseTimeout, err))
		}
	}
	var p *pending // a release that is not the last
	defer func() {
		if p == nil || !p.left {
			h.Mu.Unlock()
		}
	}()
	if !h.Live() {
		return m.afterEnd(ctx, s, h, true)
	}
	count := h.Count
	if n > count {
		return s.Wrap(fmt.Errorf("%w (release %d, %d held)", errs.NotHeld, n, count))
	}
	last := n == count
	lost := false // a last release that found the hold lost in Redis
	if last {
		// Tell everyone sharing the hold before the lock can be free;
		// renewals stop before the script is sent, so none follows it.
		// A context that the hold's own end ends (a downgrade's, in
		// the root's rwlock.go) does not end its release.
		if b != nil {
			b.unwatch()
		} else {
			h.Unwatch()
		}
		// The end is told once the reply says how it ended: a hold
		// Redis had lost is told lost, as the release returns
		// ErrLeaseLost (see lost below).
		m.wd.EndUntold(h, lease.EndUnlocked)
		defer func() {
			if lost {
				m.wd.Told(h, lease.EndLost, errs.LeaseLost)
			} else {
				m.wd.Told(h, lease.EndUnlocked, nil)
			}
		}()
		switch {
		case h.Parent.Err() != nil:
		case b != nil:
			b.watch(h)
		case h.Parent.Done() != nil:
			defer h.WatchParent()() // the keeper watched it until the end
		}
	} else {
		p = &pending{m: m, h: h, count: count, n: n}
		ctx = context.WithValue(ctx, pendingKey{}, p)
	}
	reply, sent, err := send(ctx, h, count)
	switch {
	case err != nil && (b.ended() || b == nil && h.CallParentEnded()):
		// No reply before the hold's context ended: the hold has ended
		// with it, and was the caller's until then (see afterEnd).
		if last {
			m.giveBackFrom(h, true) // try again in the background; else Redis frees it at the lease's end
		} else {
			m.endWithParent(h) // its give-back waits for the reply (pending)
		}
		return nil
	case err != nil:
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			then := "the hold counts it once its reply comes"
			if last {
				then = "the lock is released in the background, or by its lease"
			}
			err = fmt.Errorf("redisync: the release had no reply within %v (%s): %w", ReleaseTimeout, then, err)
		}
		if last {
			m.giveBackFrom(h, true) // try again in the background; else Redis frees it at the lease's end
			if transport.Refused(err) && !errors.Is(err, redis.ErrClosed) && h.InTime() &&
				!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				// No server ran it (none could be reached, or it refused
				// it unrun): the hold was the caller's until now, and its
				// release is sent again in the background until Redis
				// answers it or its lease would have ended (kept.go).
				return nil
			}
		} else if errors.Is(err, transport.ErrNoReply) {
			// Written whole, its reply lost: it may have run, and no
			// reply will come. The release scripts set the count the
			// hold has after them, so counting it done is right whether
			// it ran or not: the next release through the hold sets the
			// count again, and a last one frees the lock.
			h.Count = count - n
		}
		return s.Wrap(err)
	case reply == 0:
		m.Lose(h, true)
		lost = last
		return s.Wrap(errs.Lost)
	case reply == GoneAt && GoneInTime(h):
		// Redis lost the hold before its deadline (forced elsewhere, its
		// data lost, a key deleted): the hold has ended, and its owner
		// learns here that it was not protected until now.
		m.Lose(h, true)
		lost = last
		return s.Wrap(errs.Lost)
	case reply == 1 && !last:
		h.Count = count - n
		m.wd.Extend(h, sent)
	case reply == 2 && last:
		m.recorded(h, sent) // for the repair after a failover (heal.go)
	}
	return nil
}

// bound is the context a release through a hold runs in: the caller's
// values, ended by ReleaseTimeout or, while watched, by the end of the
// context the hold was taken with, whichever comes first. A release that
// takes the hold's lock at once needs none: its context is the hold's own
// (lease.Hold.CallCtx), which the keeper ends the same way.
type bound struct {
	ctx         context.Context
	cancel      context.CancelFunc
	stop        func() bool
	parentEnded atomic.Bool // the bound ended with the hold's context
}

// releaseBound returns the bound of a release of h with ctx, watching h's
// context.
func releaseBound(ctx context.Context, h *lease.Hold) *bound {
	b := &bound{}
	b.ctx, b.cancel = context.WithTimeout(detach(ctx), ReleaseTimeout)
	b.watch(h)
	return b
}

// watch ends b when the context h was taken with ends.
func (b *bound) watch(h *lease.Hold) {
	b.stop = context.AfterFunc(h.Parent, func() {
		b.parentEnded.Store(true)
		b.cancel()
	})
}

// unwatch stops watching; the bound stays ended if the watched context
// ended before.
func (b *bound) unwatch() { b.stop() }

// ended reports whether b ended with the hold's context (never, for nil).
func (b *bound) ended() bool { return b != nil && b.parentEnded.Load() }

// done releases b's resources.
func (b *bound) done() {
	b.stop()
	b.cancel()
}

// endWithParent ends h, and gives it back in the background, when the
// context it was taken with has ended, unless its lease ran out first
// (lease.Hold.Settle, which the Keeper has called when that context ends):
// a release calls it, so that it never finds h live meanwhile.
func (m *Machine) endWithParent(h *lease.Hold) { h.Settle() }

// GoneInTime reports whether a last release of h whose reply found the
// hold gone in Redis found it gone while its lease still stood there: its
// reply came (so the script ran) before the hold's deadline, which comes
// before Redis can let the lease run out. Renewals stop when a last
// release begins, and a release that takes long (sent again while a
// slot's keys are split between two masters, or slow on the way) can find
// a lease that ran out after that: the hold was not lost then, it lapsed
// after its Unlock began, and the release succeeds.
func GoneInTime(h *lease.Hold) bool { return h.InTime() }

// Lose ends h, which Redis no longer has (or no longer has whole), as
// lost: its holders are told first; then what Redis still keeps of a
// hold on several locks (a MultiLock) is given back. locked says the
// caller holds h.mu.
func (m *Machine) Lose(h *lease.Hold, locked bool) {
	if m.wd.End(h, lease.EndLost, errs.LeaseLost) && h.Parts {
		m.giveBackFrom(h, locked)
	}
}

// afterEnd answers a release through a hold that has already ended: nil
// at once when it ended with its context (it was the caller's until then,
// and the give-back that end started releases it in Redis, after any call
// through the hold still waiting for its reply: see giveBackFrom), an
// error otherwise. Redis may still have the lock when that nil comes
// (a silent link, a late reply ahead of the give-back); it frees it at the
// lease's end at the latest. A lost hold is cleared here, within ctx
// (locked says the caller holds h.Mu), or in the background when the
// caller does not hold h.Mu; a clearing that fails (a reset connection,
// Redis silent) does not change the answer: it is tried again in the
// background. So is an ended-with-context hold's, to make sure.
func (m *Machine) afterEnd(ctx context.Context, s *Spec, h *lease.Hold, locked bool) error {
	switch h.Reason() {
	case lease.EndParent:
		// In the background, behind the give-back the end started (not
		// once the Client is closing: Redis frees it at the lease's end).
		m.Go(func() { m.GiveBack(h) })
		return nil
	case lease.EndLost:
		if !locked {
			m.Go(func() { m.GiveBack(h) })
		} else if err := m.ReleaseAll(ctx, h.Release); err != nil {
			m.giveBackFrom(h, true)
		}
	}
	return s.Wrap(EndedError(h))
}

// EndedError describes a hold that has ended.
func EndedError(h *lease.Hold) error {
	switch h.Reason() {
	case lease.EndUnlocked:
		return fmt.Errorf("%w (already released)", errs.NotHeld)
	case lease.EndParent:
		return fmt.Errorf("%w (the hold ended with its context: %v)", errs.NotHeld, context.Cause(h.Ctx))
	case lease.EndClosed:
		return errs.Closed
	default:
		return errs.Lost
	}
}

// ReleaseAll sends calls, a hold's release calls, and returns the first
// error.
func (m *Machine) ReleaseAll(ctx context.Context, calls []call) error {
	if len(calls) == 1 {
		k := calls[0]
		k.Direct = true
		return m.tr.Do(ctx, k, nil).Err()
	}
	for _, r := range m.tr.DoAll(ctx, calls) {
		if err := r.Err(); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseBy sends k, a release script, for Release's send; a last hold
// found gone is lost (see GoneAt).
func (m *Machine) ReleaseBy(ctx context.Context, k call) (int64, time.Time, error) {
	k.Direct = true
	p, _ := ctx.Value(pendingKey{}).(*pending)
	var late func(reply)
	if p != nil {
		late = p.late
	}
	r := m.tr.Do(ctx, k, late)
	if r.Gone && p != nil {
		p.left = true // late has h's lock now
	}
	n, err := r.Int64()
	return n, r.Sent, err
}
