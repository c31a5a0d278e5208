package redisync

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/keys"
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
// Mutex and Semaphore refuse it with ErrInvalid.
func WithWaiterTimeout(d time.Duration) LockOption {
	return func(lc *lockConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: waiter timeout %v is not positive", ErrInvalid, d)
		}
		if d < 3*time.Millisecond {
			return fmt.Errorf("%w: waiter timeout %v is below 3ms", ErrInvalid, d)
		}
		lc.waiter = d
		return nil
	}
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
// the queue uses two sorted sets in the name's hash tag slot; none of the
// keys is left in Redis once the lock is free and nobody waits.
//
// A FairMutex is a cheap handle, safe for concurrent use.
type FairMutex struct {
	c        *Client
	name     string
	queue    string // zset: waiter field -> arrival number
	timeouts string // zset: waiter field -> deadline (ms, Redis clock)
	prefix   string // waiter channel prefix; a waiter listens on prefix+field
	lease    time.Duration
	renewed  bool
	waiter   time.Duration
	err      error
}

// FairMutex returns a handle on the fair lock name. Bad input (an empty name,
// a name whose companion keys cannot share its Cluster slot, a bad option) is
// reported by every method of the handle.
func (c *Client) FairMutex(name string, opts ...LockOption) *FairMutex {
	f := &FairMutex{name: name}
	if c == nil {
		f.err = fmt.Errorf("%w: nil Client", ErrInvalid)
		return f
	}
	lc, err := lockSetup(name, opts, true)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: lock name %q has a \"}\" outside a hash tag", ErrInvalid, name)
	}
	f.c, f.err, f.lease, f.renewed, f.waiter = c, err, c.lease, true, DefaultWaiterTimeout
	if lc.lease > 0 {
		f.lease, f.renewed = lc.lease, false
	}
	if lc.waiter > 0 {
		f.waiter = lc.waiter
	}
	if err == nil {
		f.queue = keys.Tagged(name, "fair:queue")
		f.timeouts = keys.Tagged(name, "fair:timeouts")
		f.prefix = keys.Tagged(name, "fair:")
	}
	return f
}

// Name returns the lock's name, which is also its Redis key.
func (f *FairMutex) Name() string { return f.name }

func (f *FairMutex) check() error {
	if f.err != nil {
		return f.err
	}
	return f.c.checkOpen()
}

func (f *FairMutex) wrap(err error) error {
	return fmt.Errorf("redisync: fair lock %q: %w", f.name, err)
}

func (f *FairMutex) keys() []string { return []string{f.name, f.queue, f.timeouts} }

func (f *FairMutex) holdID(field string) string { return "fair\x00" + f.name + "\x00" + field }

// refresh is how often a waiter renews its place in the queue.
func (f *FairMutex) refresh() time.Duration { return f.waiter / 3 }

// Lock acquires the lock for ctx's owner in arrival order, waiting until it
// is this owner's turn or ctx ends (then it returns ctx's error and leaves the
// queue at once). A re-entry by an owner that holds the lock does not queue.
//
// It returns the hold's context, as Mutex.Lock does: pass it down to
// re-enter and to Unlock; it is cancelled with cause ErrLeaseLost if the
// lease is lost, and plainly when the owner's last hold is released.
func (f *FairMutex) Lock(ctx context.Context) (context.Context, error) {
	return f.lock(ctx, true)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the lock or when others queue for
// it (it never jumps the queue, and never joins it).
func (f *FairMutex) TryLock(ctx context.Context) (context.Context, error) {
	return f.lock(ctx, false)
}

func (f *FairMutex) lock(parent context.Context, wait bool) (context.Context, error) {
	if err := f.check(); err != nil {
		return parent, err
	}
	if err := parent.Err(); err != nil {
		return parent, err
	}
	ctx, o := ensureOwner(parent)
	hctx, next, err := f.try(ctx, o, wait)
	if err != nil {
		if wait {
			f.leave(ctx, o)
		}
		return parent, err
	}
	if hctx != nil {
		return hctx, nil
	}
	if !wait {
		return parent, f.wrap(ErrNotAcquired)
	}
	// Only this owner's waiters listen on its channel: wake them all.
	err = f.c.await(ctx, f.prefix+f.c.field(o), wakeAll, next, func() (bool, time.Duration, error) {
		hctx, next, err = f.try(ctx, o, true)
		return hctx != nil, next, err
	})
	if err != nil {
		f.leave(ctx, o)
		return parent, err
	}
	return hctx, nil
}

// leave takes o out of the queue after a wait that ended without the lock,
// best-effort: an entry left behind expires with its deadline.
func (f *FairMutex) leave(ctx context.Context, o *owner) {
	cleanup(ctx, func(ctx context.Context) {
		o.mu.Lock()
		defer o.mu.Unlock()
		_ = lua.FairLeave.Run(ctx, f.c.rdb, f.keys(), f.c.field(o), f.prefix).Err()
	})
}

// try runs the lock script once, queueing (or refreshing o's place) when
// queue is set. It returns the hold's context when o holds the lock, or the
// bound to wait before trying again.
func (f *FairMutex) try(ctx context.Context, o *owner, queue bool) (context.Context, time.Duration, error) {
	field := f.c.field(o)
	id := f.holdID(field)
	ks := f.keys()
	leaseMs := f.lease.Milliseconds()
	var waiterMs int64
	if queue {
		waiterMs = f.waiter.Milliseconds()
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	h := f.c.wd.get(id)
	count := 0
	if h != nil {
		count = h.count
	}
	// The script runs to completion even if ctx ends meanwhile (see Mutex).
	sent := time.Now()
	r, err := lua.FairLock.Run(context.WithoutCancel(ctx), f.c.rdb, ks, leaseMs, field, count, waiterMs, f.prefix).Int64Slice()
	if err != nil {
		return nil, 0, f.wrap(err)
	}
	if r[0] == 0 {
		next := bound(r[1], f.lease/3)
		if queue {
			next = min(next, f.refresh())
		}
		return nil, next, nil
	}
	if h != nil {
		h.count = int(r[1])
		f.c.wd.extend(h, sent)
		return ctx, 0, nil
	}
	hctx, cancel := context.WithCancelCause(ctx)
	h = &hold{
		id:      id,
		lease:   f.lease,
		renewed: f.renewed,
		renew:   call{lua.Renew, []string{f.name}, []any{field, leaseMs}},
		release: call{lua.FairDrop, ks, []any{field, f.prefix}},
		count:   int(r[1]),
		ctx:     hctx,
		cancel:  cancel,
	}
	if !f.c.wd.add(h, sent) {
		cancel(ErrClosed)
		rctx, done := detach(ctx)
		defer done()
		_ = lua.FairDrop.Run(rctx, f.c.rdb, ks, field, f.prefix).Err()
		return nil, 0, ErrClosed
	}
	return hctx, 0, nil
}

// Unlock releases one hold of ctx's owner; when the owner's last hold is
// released the lock is handed to the head of the queue, and only that waiter
// is woken. It returns an error wrapping ErrNotHeld, changing nothing, when
// the owner does not hold the lock. It works with a cancelled ctx.
func (f *FairMutex) Unlock(ctx context.Context) error {
	if err := f.check(); err != nil {
		return err
	}
	o := ownerOf(ctx)
	if o == nil {
		return f.wrap(fmt.Errorf("%w (the context carries no owner)", ErrNotHeld))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	field := f.c.field(o)
	ks := f.keys()

	o.mu.Lock()
	defer o.mu.Unlock()
	h := f.c.wd.get(f.holdID(field))
	if h == nil {
		n, err := lua.FairDrop.Run(ctx, f.c.rdb, ks, field, f.prefix).Int64()
		if err != nil {
			return f.wrap(err)
		}
		if n == 1 {
			return nil
		}
		return f.wrap(ErrNotHeld)
	}
	err := f.c.wd.unhold(h, func(count int) (int64, error) {
		return lua.FairUnlock.Run(ctx, f.c.rdb, ks, field, count, f.lease.Milliseconds(), f.prefix).Int64()
	})
	if err != nil {
		return f.wrap(err)
	}
	return nil
}

// IsLocked reports whether any owner holds the lock.
func (f *FairMutex) IsLocked(ctx context.Context) (bool, error) {
	if err := f.check(); err != nil {
		return false, err
	}
	ok, err := hashLocked(ctx, f.c, f.name)
	if err != nil {
		return false, f.wrap(err)
	}
	return ok, nil
}

// HoldCount returns how many holds ctx's owner has on the lock (0 when none).
func (f *FairMutex) HoldCount(ctx context.Context) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	n, err := hashHolds(ctx, f.c, f.name)
	if err != nil {
		return 0, f.wrap(err)
	}
	return n, nil
}

// TTL returns the lock's remaining lease: 0 when it is free, and a negative
// duration when its key has no expiry (it was not written by a lock).
func (f *FairMutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	d, err := hashLease(ctx, f.c, f.name)
	if err != nil {
		return 0, f.wrap(err)
	}
	return d, nil
}

// ForceUnlock frees the lock whoever holds it and hands it to the head of the
// queue, reporting whether it was held. Holders lose their lease: their
// contexts are cancelled with ErrLeaseLost (at once in this process, at their
// next renewal in others). The queue is kept.
func (f *FairMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := f.check(); err != nil {
		return false, err
	}
	n, err := lua.FairForceUnlock.Run(ctx, f.c.rdb, []string{f.name, f.queue}, f.prefix).Int64()
	if err != nil {
		return false, f.wrap(err)
	}
	f.c.wd.loseAll("fair\x00" + f.name + "\x00")
	return n == 1, nil
}
