package holds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
)

// reenter acquires once more through h, the live hold ctx carries,
// waiting as long as wctx lasts (with wait, riding out a Redis that is
// not ready, see notReady): build makes the script's call for h's
// count, parse reads its reply (the new count, or lost when Redis no
// longer has the hold), and undo makes the call that takes back a
// re-entry to count n, for a re-entry that was not acknowledged
// (WithReplicaAck) or whose caller left. A handle whose lease or fencing
// differs from the hold's is refused, changing nothing.
func (m *Machine) Reenter(ctx, wctx context.Context, wait bool, s *Spec, h *lease.Hold,
	build func(count int) call, parse func([]int64) (n int, lost bool), undo func(n int) call) (context.Context, error) {
	return m.ReenterBy(ctx, wctx, s, h, func() ([]int64, error) {
		return m.UnderHold(wctx, wait, h, build, func(v []int64) {
			if v[0] == 1 {
				m.UndoHeld(undo(int(v[1])))
			}
		})
	}, parse, func(n int) error { return m.UndoUnder(wctx, h, undo(n)) })
}

// reenterBy is reenter with the sending step given: send runs the
// re-entry under h's lock as underHold (or underHoldAll) does, and undo
// takes back a re-entry to count n that was not acknowledged, under h's
// lock, which send left held for it (see undoUnder).
func (m *Machine) ReenterBy(ctx, wctx context.Context, s *Spec, h *lease.Hold,
	send func() ([]int64, error), parse func([]int64) (n int, lost bool), undo func(n int) error) (context.Context, error) {
	if h.Lease != s.Lease || h.Renewed != s.Renewed {
		return nil, s.Wrap(fmt.Errorf("%w: the context holds it with a %s, this handle asks for a %s",
			errs.Invalid, LeaseText(h.Lease, h.Renewed), LeaseText(s.Lease, s.Renewed)))
	}
	if (h.Token != 0) != s.Fenced {
		return nil, s.Wrap(fmt.Errorf("%w: the context holds it %s, this handle asks for it %s",
			errs.Invalid, FencingText(h.Token != 0), FencingText(s.Fenced)))
	}
	r, err := send()
	var n int
	var lost bool
	if err == nil {
		if n, lost = parse(r); !lost {
			h.Count = n
			m.wd.Extend(h, h.LastSent)
		}
		h.Mu.Unlock()
	}
	switch {
	case errors.Is(err, ErrEnded):
		return nil, s.Wrap(EndedError(h))
	case NotReplicated(err) != nil:
		nr := NotReplicated(err)
		nr.Undo = undo(nr.Count())
		return nil, s.Wrap(err)
	case err != nil:
		// wctx is TryLockFor's bound when it is not ctx: its end while
		// ctx lives is errs.NotAcquired, as for a first acquisition.
		return nil, s.Wrap(errs.Wait(err, ctx, wctx != ctx))
	case lost:
		m.Lose(h, false) // told before the caller returns
		return nil, s.Wrap(errs.Lost)
	case !h.Live():
		return nil, s.Wrap(EndedError(h))
	}
	return h.ContextFor(ctx), nil
}

// ErrEnded reports, inside UnderHold, a hold found ended.
var ErrEnded = errors.New("redisync: the hold has ended")

// underHold sends the call build makes for h's count, under h's lock, and
// waits for the lock and for the reply as long as ctx lasts. On success it
// returns the reply with h's lock still held, for the caller to apply and
// unlock; on an error the lock is released (or was never taken, when ctx
// ended while waiting for it). When ctx ends during the call, the lock
// stays held until the reply comes, and then taken (unless nil) runs with
// the reply when the script took something, to give it back, and waits
// for that (undoHeld): the lock is released after it. A reply that took
// something the replicas did not acknowledge (WithReplicaAck) is a
// *notReplicatedError, returned with h's lock still held: the caller
// takes it back under the lock (undoUnder).
func (m *Machine) UnderHold(ctx context.Context, wait bool, h *lease.Hold, build func(count int) call, taken func([]int64)) ([]int64, error) {
	for {
		if err := lockLive(ctx, h); err != nil {
			return nil, err
		}
		k := build(h.Count)
		k.Takes = true
		r := m.tr.Do(ctx, k, func(r reply) {
			defer h.Mu.Unlock()
			if v, err := r.Int64Slice(); err == nil && taken != nil && len(v) >= 2 {
				taken(v)
			}
		})
		if r.Gone {
			return nil, r.Err()
		}
		v, err := m.Acquired(r)
		if err != nil {
			if again, err := failedUnder(ctx, wait, h, err); !again {
				return nil, err
			}
			continue
		}
		h.LastSent = r.Sent
		return v, nil
	}
}

// lockLive takes h's lock, waiting as long as ctx lasts, for a call
// through h: it fails with ErrEnded, the lock released, when h has ended.
func lockLive(ctx context.Context, h *lease.Hold) error {
	if err := h.Mu.LockCtx(ctx); err != nil {
		return err
	}
	if !h.Live() {
		h.Mu.Unlock()
		return ErrEnded
	}
	return nil
}

// failedUnder handles err, the failure of a call sent under h's lock
// (underHold, underHoldAll): a *notReplicatedError keeps the lock held
// for the undo; otherwise the lock is released, and with wait a Redis
// that is loading its data or settling (the script did not run) is ridden
// out: again says to send the call once more, after RetryAfter.
func failedUnder(ctx context.Context, wait bool, h *lease.Hold, err error) (again bool, _ error) {
	if NotReplicated(err) != nil {
		return false, err // h's lock stays held for the undo
	}
	h.Mu.Unlock()
	var re redis.Error
	if wait && errors.As(err, &re) && errs.NotReady(err) {
		if err := sleepCtx(ctx, RetryAfter); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, err
}

// sleepCtx waits d, or less if ctx ends first (then it returns ctx's
// error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// underHoldAll is underHold for a hold on several slots: build makes one
// call per slot, all sent at once. It returns the first reply that did
// not take (the hold is gone there), else the first reply, with h's lock
// held; lastSent is the earliest of their sends. With wait, it rides out
// a Redis that is not ready, as underHold does. Its scripts set absolute
// counts, so a call abandoned when ctx ends, or one that ran where others
// failed, needs no give-back: the next call through the hold sets every
// count again, and the last release deletes the hold whatever its count.
// A *notReplicatedError is returned with h's lock held, as by underHold.
func (m *Machine) UnderHoldAll(ctx context.Context, wait bool, h *lease.Hold, build func(count int) []call) ([]int64, error) {
	for {
		if err := lockLive(ctx, h); err != nil {
			return nil, err
		}
		calls := build(h.Count)
		for i := range calls {
			calls[i].Takes = true
		}
		var first []int64
		var sent time.Time
		var ferr error
		for _, r := range m.tr.DoAll(ctx, calls) {
			v, err := m.Acquired(r)
			switch {
			case err != nil:
				if ferr == nil || NotReplicated(ferr) != nil || errs.NotReady(ferr) {
					ferr = err // an unknown outcome before a refused one
				}
			case first == nil || v[0] != 1 && first[0] == 1:
				first = v
			}
			if err == nil && (sent.IsZero() || r.Sent.Before(sent)) {
				sent = r.Sent
			}
		}
		if ferr != nil {
			if again, err := failedUnder(ctx, wait, h, ferr); !again {
				return nil, err
			}
			continue
		}
		h.LastSent = sent
		return first, nil
	}
}

// entry returns the live hold of ref that a Lock with ctx re-enters, or nil
// for a first acquisition. A context that carries a hold of ref that was
// lost (or ended with its context, or by Close) is refused: acquiring again
// would silently make a new hold of what its caller believes it still has.
func Entry(ctx context.Context, ref lease.Ref) (*lease.Hold, error) {
	h := Carried(ctx, ref)
	if h == nil {
		return nil, nil
	}
	switch h.Reason() {
	case lease.NotEnded:
		return h, nil
	case lease.EndUnlocked:
		return nil, nil
	default:
		return nil, EndedError(h)
	}
}
