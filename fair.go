package redisync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/lua"
)

// DefaultWaiterTimeout is how long a waiter of a FairMutex (or a waiting
// writer of an RWMutex) stays registered in Redis after its last sign of
// life, unless WithWaiterTimeout says otherwise.
const DefaultWaiterTimeout = 5 * time.Second

// WithWaiterTimeout bounds how long a dead waiter can hold others back: a
// waiter of a FairMutex keeps its place in the queue, and a waiting writer of
// an RWMutex keeps new readers out, by refreshing a deadline of d (counted on
// Redis's clock) every d/3 while it waits; a waiter whose process dies is
// dropped at most d after it died. The default is DefaultWaiterTimeout (5s).
// It applies to FairMutex and RWMutex (a WaiterOption).
func WithWaiterTimeout(d time.Duration) WaiterOption {
	return waiterOpt(func(lc *lockConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: waiter timeout %v is not positive", ErrInvalid, d)
		}
		if d < 3*time.Millisecond || d > MaxLease {
			return fmt.Errorf("%w: waiter timeout %v is not between 3ms and MaxLease (%v)", ErrInvalid, d, MaxLease)
		}
		lc.waiter = lease.WholeMs(d)
		return nil
	})
}

// FairMutex is a reentrant distributed lock granted strictly in arrival order
// across processes: a waiter joins a queue kept in Redis on its first failed
// attempt, and an unlock hands the lock to the head of the queue, waking only
// that waiter. Holds, owners, re-entry, leases and the hold's context work
// exactly as for Mutex.
//
// Waiters keep their place by refreshing a deadline (Redis's clock, never a
// client's) while they wait; see WithWaiterTimeout for the bound on how long
// a crashed waiter can block the queue. A waiter whose context ends leaves the
// queue at once. Besides the lock's own key (a hash at the name, as Mutex),
// the queue uses two sorted sets in the name's Cluster slot,
// "{tag}:fair-queue:<name>" and "{tag}:fair-timeouts:<name>" (tag is the
// name's hash tag, or the name); none of the keys is left in Redis once the
// lock is free and nobody waits, but the fencing counter of WithFencing.
//
// A FairMutex is a cheap handle, safe for concurrent use.
type FairMutex struct {
	c        *Client
	name     string
	queue    string // zset: waiter field -> arrival number
	timeouts string // zset: waiter field -> deadline (ms, Redis clock)
	prefix   string // waiter channel prefix; a waiter listens on prefix+field
	fence    string // the fencing counter's key (WithFencing), or ""
	spec     holds.Spec
	waiter   time.Duration
	err      error

	// Made once, shared by every call (never written), as the Mutex's.
	ks       []string                                                                      // keys(): the lock's, the queue's, the timeouts'
	lockKeys []string                                                                      // the lock script's: ks, and the fencing counter's when fenced
	nameKey  []string                                                                      // {name}
	leaseMS  any                                                                           // spec.Lease in milliseconds
	waiterMS any                                                                           // waiter in milliseconds
	prefArg  any                                                                           // prefix
	release  func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) // Unlock's
}

// FairMutex returns a handle on the fair lock name. Bad input (an empty name,
// a name whose companion keys cannot share its Cluster slot, a bad option) is
// reported by every method of the handle.
//
// Options (FairOption): WithLease or WithRenewedLease, WithFencing and
// WithWaiterTimeout.
func (c *Client) FairMutex(name string, opts ...FairOption) *FairMutex {
	f := &FairMutex{c: c, name: name, waiter: DefaultWaiterTimeout}
	if keys.Taggable(name) {
		f.queue = keys.Companion(name, "fair-queue")
		f.timeouts = keys.Companion(name, "fair-timeouts")
		f.prefix = keys.Companion(name, "fair-wake") + ":"
	}
	f.spec.Wrap = wrapFor(c, "fair lock", name, keyType{name, "hash"}, keyType{f.queue, "zset"}, keyType{f.timeouts, "zset"})
	if c == nil {
		f.err = f.spec.Wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return f
	}
	lc, err := lockSetup(name, opts)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: lock name %q has a \"}\" outside a hash tag", ErrInvalid, name)
	}
	if err == nil && lc.fence {
		f.fence, f.spec.Fenced = fenceKey(name), true
		f.spec.Wrap = wrapFor(c, "fair lock", name, keyType{name, "hash"}, keyType{f.queue, "zset"}, keyType{f.timeouts, "zset"}, keyType{f.fence, "string"})
	}
	f.err = f.spec.Wrap(err)
	f.spec.Ref = lease.Ref{Owner: c, Kind: string(KindFairMutex), Name: name}
	f.spec.Busy = (*fairBusy)(f)
	f.spec.Lease, f.spec.Renewed = lc.leaseOf(c)
	if lc.waiter > 0 {
		f.waiter = lc.waiter
	}
	f.ks = []string{f.name, f.queue, f.timeouts}
	f.lockKeys = f.ks
	if f.fence != "" {
		f.lockKeys = []string{f.name, f.queue, f.timeouts, f.fence}
	}
	f.nameKey = []string{f.name}
	f.leaseMS, f.waiterMS, f.prefArg = f.spec.Lease.Milliseconds(), f.waiter.Milliseconds(), f.prefix
	f.release = f.releaseHold
	return f
}

// Name returns the lock's name, which is also its Redis key.
func (f *FairMutex) Name() string { return f.name }

func (f *FairMutex) check(ctx context.Context) error {
	if f.err != nil {
		return f.err
	}
	return f.wrap(usable(ctx, f.c, f.spec.Wrap))
}

func (f *FairMutex) wrap(err error) error { return wrapOr(f.spec.Wrap, err) }

func (f *FairMutex) keys() []string { return f.ks }

// refresh is how often a waiter renews its place in the queue.
func (f *FairMutex) refresh() time.Duration { return f.waiter / 3 }

// Lock acquires the lock in arrival order, waiting until it is this caller's
// turn or ctx ends (then it returns an error wrapping ctx's error and
// leaves the queue at once). A re-entry does not queue.
//
// It returns the hold's context, with Mutex.Lock's rules: a nested Lock
// with it re-enters, the hold ends with ctx, and the context is cancelled
// with cause ErrLeaseLost if the lease is lost.
func (f *FairMutex) Lock(ctx context.Context) (context.Context, error) {
	return f.lock(ctx, ctx, true, false)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the lock or when others queue for
// it (it never jumps the queue, and never joins it).
func (f *FairMutex) TryLock(ctx context.Context) (context.Context, error) {
	return f.lock(ctx, ctx, false, false)
}

// TryLockFor is Lock waiting at most wait (wait > 0): after it, it leaves
// the queue and returns an error wrapping ErrNotAcquired. The bound is on the
// wait only: a hold it gets lasts as long as ctx.
func (f *FairMutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWait(wait); err != nil {
		return nil, f.wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return f.lock(ctx, wctx, true, true)
}

func (f *FairMutex) lock(parent, wctx context.Context, wait, bounded bool) (hctx context.Context, err error) {
	if err := f.check(parent); err != nil {
		return nil, err
	}
	if err := wctx.Err(); err != nil {
		return nil, f.wrap(errs.Wait(err, parent, bounded))
	}
	h, err := holds.Entry(parent, f.spec.Ref)
	if err != nil {
		return nil, f.wrap(err)
	}
	if h != nil {
		hctx, err := f.c.holds.Reenter(parent, wctx, wait, &f.spec, h, holds.Reentry{
			Calls: func(count int) []call { return []call{f.script(h, h.Arg(), count, false)} },
			Undo:  func(n int) []call { return []call{f.unlockCall(h, n)} },
		})
		if err != nil {
			return nil, err
		}
		return hctx, nil
	}

	a := f.c.holds.BeginWith(&f.spec, parent, wctx, wait, (*fairScripts)(f))
	a.Restart = true // a new owner queues, and listens, as itself
	defer func() { err = a.Finish(err) }()
	for {
		done, next, err := f.try(a, wait)
		if err == nil && !done && wait {
			// Only this waiter listens on its channel: wake it at every message.
			try := func() (bool, time.Duration, error) { return f.try(a, wait) }
			err = f.c.holds.Await(wctx, f.prefix+a.Owner, notify.WakeAll, next, try)
		}
		if errors.Is(err, holds.ErrNewOwner) {
			continue // a new owner listens on a new channel
		}
		if err != nil {
			if wait {
				f.leave(a.Owner)
			}
			return nil, f.wrap(errs.Wait(err, parent, bounded))
		}
		if !a.Won {
			return nil, f.wrap(ErrNotAcquired)
		}
		return a.HoldCtx, nil
	}
}

// try is one attempt of a's first acquisition, queueing (or refreshing
// the caller's place) when wait is set.
func (f *FairMutex) try(a *holds.Acquisition, wait bool) (bool, time.Duration, error) {
	field, r, d, err := a.Send(func(field string) call { return f.script(a.Room(), a.Arg(field), 0, wait) })
	if r == nil {
		return false, d, err
	}
	if r[0] != 1 {
		next := lease.Bound(r[1], f.spec.Lease/3)
		if wait {
			next = min(next, f.refresh())
		}
		return false, next, nil
	}
	return a.GrantOne(field, int(r[1]), call{Script: lua.Renew, Keys: f.nameKey, Args: a.Args(a.Arg(field), f.leaseMS)})
}

// script is the lock script's call for the field whose argument is
// field, with its hold count before the call, queueing (or refreshing the
// caller's place) when queue is set (with the fencing counter's key when
// fenced), its arguments kept in room (a hold's, or an acquisition's Room).
func (f *FairMutex) script(room *lease.Hold, field any, count int, queue bool) call {
	var waiterMs any = 0
	if queue {
		waiterMs = f.waiterMS
	}
	return call{Script: lua.FairLock, Keys: f.lockKeys, Args: room.Args(f.leaseMS, field, count, waiterMs, f.prefArg, publish)}
}

// fairScripts is a FairMutex as the maker of its first acquisitions'
// give-backs and leaves (holds.Scripts, holds.Leaves).
type fairScripts FairMutex

// Release gives back a granted attempt of field.
func (s *fairScripts) Release(a *holds.Acquisition, field string) call {
	return call{Script: lua.FairDrop, Keys: s.ks, Args: a.Args(a.Arg(field), s.prefArg, publish)}
}

// Left takes field out of the queue.
func (s *fairScripts) Left(_ *holds.Acquisition, field string) []call {
	return []call{(*FairMutex)(s).leaveCall(field)}
}

// leaveCall takes field out of the queue.
func (f *FairMutex) leaveCall(field string) call {
	return script(lua.FairLeave, f.keys(), field, f.prefix, publish)
}

// leave takes field out of the queue after a wait that ended without the
// lock, best-effort: an entry left behind expires with its deadline.
func (f *FairMutex) leave(field string) { f.c.holds.Cleanup(f.waiter, f.leaveCall(field)) }

// Unlock releases one hold of the lock that ctx carries; when the last hold
// is released the lock is handed to the head of the queue, and only that
// waiter is woken. Its results, and its bound (the end of the context the
// hold was taken with, 5s at most), are Mutex.Unlock's. It works with a
// cancelled ctx.
func (f *FairMutex) Unlock(ctx context.Context) error {
	if err := f.check(ctx); err != nil {
		return err
	}
	return f.c.holds.Release(ctx, &f.spec, 1, f.release)
}

// releaseHold releases one hold of h, whose count is count (Unlock's
// send).
func (f *FairMutex) releaseHold(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
	return f.c.holds.ReleaseBy(ctx, f.unlockCall(h, count))
}

// unlockCall is the unlock script's call for h with its hold count before
// the call.
func (f *FairMutex) unlockCall(h *lease.Hold, count int) call {
	lms := f.leaseMS
	if h.Lease != f.spec.Lease {
		lms = h.Lease.Milliseconds()
	}
	return call{Script: lua.FairUnlock, Keys: f.ks, Args: h.Args(h.Arg(), count, lms, f.prefArg, publish)}
}

// IsLocked reports whether any owner holds the lock.
func (f *FairMutex) IsLocked(ctx context.Context) (bool, error) {
	if err := f.check(ctx); err != nil {
		return false, err
	}
	ok, err := hashLocked(ctx, f.c, f.name)
	return ok, f.wrap(err)
}

// HoldCount returns how many holds of the lock the hold ctx carries has (0
// when ctx carries none), as Redis has it.
func (f *FairMutex) HoldCount(ctx context.Context) (int, error) {
	if err := f.check(ctx); err != nil {
		return 0, err
	}
	n, err := hashHolds(ctx, f.c, f.spec.Ref)
	return n, f.wrap(err)
}

// TTL returns the lock's remaining lease: 0 when it is free, and a negative
// duration when its key has no expiry (it was not written by a lock).
func (f *FairMutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := f.check(ctx); err != nil {
		return 0, err
	}
	d, err := hashLease(ctx, f.c, f.name)
	return d, f.wrap(err)
}

// ForceUnlock frees the lock whoever holds it and hands it to the head of the
// queue, reporting whether it was held. Holders lose their lease: their
// contexts are cancelled with ErrLeaseLost, in this process before the lock
// is freed, in others at their next renewal. The queue is kept.
// When ctx ends before the script has answered, ForceUnlock returns ctx's
// error and the script may still run: until it has answered, this
// Client's new acquisitions of the lock wait for it (TryLock reports
// ErrNotAcquired), so none is freed by it.
func (f *FairMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := f.check(ctx); err != nil {
		return false, err
	}
	n, err := f.c.holds.ForceBy(ctx, script(lua.FairForceUnlock, []string{f.name, f.queue}, f.prefix, publish), f.spec.Ref).Int64()
	if err != nil {
		return false, f.wrap(err)
	}
	return n == 1, nil
}
