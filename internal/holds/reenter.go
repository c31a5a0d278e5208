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

// Reentry is a primitive's re-entry through a live hold: its scripts,
// and how to read and take back their replies.
type Reentry struct {
	// Calls makes the re-entry's scripts for the hold's count: one call,
	// or one per slot of a hold on several (a MultiLock), sent at once.
	Calls func(count int) []call
	// Undo makes the scripts that take a re-entry back to count n, for a
	// re-entry that was not acknowledged (WithReplicaAck) or, unless
	// Batch, whose caller left before its script answered.
	Undo func(n int) []call
	// Batch says the calls are a MultiLock's (one per slot, or one for
	// names that share a slot), whose scripts set absolute counts: sent
	// as a batch, and one abandoned needs no give-back (see UnderHold).
	Batch bool
}

// Reenter acquires once more through h, the live hold ctx carries,
// waiting as long as wctx lasts (with wait, riding out a Redis that is
// not ready, see errs.NotReady), and returns the re-entry's context. A
// handle whose lease or fencing differs from the hold's is refused,
// changing nothing.
func (m *Machine) Reenter(ctx, wctx context.Context, wait bool, s *Spec, h *lease.Hold, re Reentry) (context.Context, error) {
	if h.Lease != s.Lease || h.Renewed != s.Renewed {
		return nil, s.Wrap(fmt.Errorf("%w: the context holds it with a %s, this handle asks for a %s",
			errs.Invalid, LeaseText(h.Lease, h.Renewed), LeaseText(s.Lease, s.Renewed)))
	}
	if (h.Token != 0) != s.Fenced {
		return nil, s.Wrap(fmt.Errorf("%w: the context holds it %s, this handle asks for it %s",
			errs.Invalid, FencingText(h.Token != 0), FencingText(s.Fenced)))
	}
	var taken func([]int64)
	if !re.Batch {
		taken = func(v []int64) {
			if v[0] == 1 {
				_ = m.UndoNow(context.Background(), nil, re.Undo(int(v[1]))...)
			}
		}
	}
	r, err := m.UnderHold(wctx, wait, h, s.Counts, re.Calls, taken)
	var n int
	var lost bool
	if err == nil {
		// {1, count}: the hold's new count; anything else: Redis no
		// longer has the hold.
		if n, lost = int(r[1]), r[0] != 1; !lost {
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
		nr.Undo = m.UndoNow(wctx, h, re.Undo(nr.Count())...) // under h's lock, which UnderHold kept
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

// UnderHold sends the calls build makes for h's count, under h's lock,
// and waits for the lock and for the replies as long as ctx lasts. On
// success it returns the first reply that did not take (the hold is gone
// there), else the first reply, with h's lock still held for the caller
// to apply and unlock; h.LastSent is the earliest of the calls' sends. On
// an error the lock is released (or was never taken, when ctx ended while
// waiting for it), except for a reply that took something the replicas
// did not acknowledge (WithReplicaAck): that *NotReplicatedError is
// returned with h's lock held, for the caller to take it back under the
// lock (UndoNow). With wait, a Redis that is not ready is ridden out.
// counts says how the scripts answer (see Took).
//
// With taken, build makes one call, and when ctx ends while it is on its
// way, h's lock stays held until its reply comes; then taken runs with
// that reply when the script took something, to give it back, and must
// wait for that: the lock is released after it (see undo.go's rule).
// Without taken, the calls are a batch of scripts that set absolute
// counts (a MultiLock's, one per slot): sent together, and when ctx ends,
// or one ran where others failed, they need no give-back: the next call
// through the hold sets every count again, and the last release deletes
// the hold whatever its count.
func (m *Machine) UnderHold(ctx context.Context, wait bool, h *lease.Hold, counts bool, build func(count int) []call, taken func([]int64)) ([]int64, error) {
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
		if taken != nil {
			r := m.tr.Do(ctx, calls[0], func(r reply) {
				defer h.Mu.Unlock()
				if v, err := Took(r, counts, nil); err == nil && len(v) >= 2 {
					taken(v)
				}
			})
			if r.Gone {
				return nil, r.Err()
			}
			first, ferr = m.AcquiredAs(r, counts, nil)
			sent = r.Sent
		} else {
			for _, r := range m.tr.DoAll(ctx, calls) {
				v, err := m.AcquiredAs(r, counts, nil)
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
// (UnderHold): a *NotReplicatedError keeps the lock held
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
