package redisync

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/lua"
)

// RWMutex is a reentrant distributed read-write lock: many owners may hold
// the read lock at once, or one owner the write lock. Both are reentrant by
// owner, and the owner of the write lock may also take the read lock (a
// downgrade: after its last Unlock it still holds the read lock). A reader
// may not upgrade: see Lock.
//
// Writers are not starved: as with sync.RWMutex, once a writer waits, owners
// that do not already hold the read lock wait behind it; and readers are not
// starved either: the readers that waited for a write hold go before the
// next writer when it ends. A writer that waits keeps new readers out only
// while it is alive: it refreshes its registration (see WithWaiterTimeout),
// so a crashed writer holds readers back for at most the waiter timeout.
//
// Every read hold has its own lease, kept alive by the Client's watchdog like
// any hold, so a crashed reader's hold expires within one watchdog timeout
// while live readers keep theirs. Releasing a read hold costs O(log n) in the
// number of readers. The hold's context and owner rules are Mutex's.
//
// Its keys are a hash at the lock's name and four sorted sets in the name's
// hash tag slot (read leases, waiting writers, waiting and admitted readers);
// none of them is left in Redis once the lock is free and nobody waits.
//
// An RWMutex is a cheap handle, safe for concurrent use.
type RWMutex struct {
	c       *Client
	name    string
	keys    []string // hash, read holders, waiting writers, waiting readers, admitted readers
	rchan   string   // wakes waiting readers (all of them)
	wchan   string   // wakes a waiting writer
	lease   time.Duration
	renewed bool
	waiter  time.Duration
	err     error
}

// rwWriteKey marks a write hold's context with the context it was taken
// with, so a read hold taken under it (a downgrade) can outlive it.
type rwWriteKey struct {
	c    *Client
	name string
}

// RWMutex returns a handle on the read-write lock name. Bad input (an empty
// name, a name whose companion keys cannot share its Cluster slot, a bad
// option) is reported by every method of the handle.
func (c *Client) RWMutex(name string, opts ...LockOption) *RWMutex {
	r := &RWMutex{name: name}
	if c == nil {
		r.err = fmt.Errorf("%w: nil Client", ErrInvalid)
		return r
	}
	lc, err := lockSetup(name, opts, true)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: lock name %q has a \"}\" outside a hash tag", ErrInvalid, name)
	}
	r.c, r.err, r.lease, r.renewed, r.waiter = c, err, c.lease, true, DefaultWaiterTimeout
	if lc.lease > 0 {
		r.lease, r.renewed = lc.lease, false
	}
	if lc.waiter > 0 {
		r.waiter = lc.waiter
	}
	if err == nil {
		r.keys = []string{
			name,
			keys.Tagged(name, "rw:readers"),
			keys.Tagged(name, "rw:writers-waiting"),
			keys.Tagged(name, "rw:readers-waiting"),
			keys.Tagged(name, "rw:readers-admitted"),
		}
		r.rchan = keys.Tagged(name, "rw:wake-readers")
		r.wchan = keys.Tagged(name, "rw:wake-writer")
	}
	return r
}

// Name returns the lock's name, which is also the key of its hash.
func (r *RWMutex) Name() string { return r.name }

func (r *RWMutex) check() error {
	if r.err != nil {
		return r.err
	}
	return r.c.checkOpen()
}

func (r *RWMutex) wrap(err error) error {
	return fmt.Errorf("redisync: rw lock %q: %w", r.name, err)
}

func (r *RWMutex) readID(field string) string  { return "rw-read\x00" + r.name + "\x00" + field }
func (r *RWMutex) writeID(field string) string { return "rw-write\x00" + r.name + "\x00" + field }

// RLock acquires the read lock for ctx's owner, waiting while another owner
// holds the write lock or, unless the owner already holds the read lock,
// while a writer waits; it returns ctx's error if ctx ends first. A context
// without an owner gets a new one.
//
// It returns the read hold's context, with Mutex.Lock's rules: a re-entry
// returns ctx as given; a first read hold taken while the owner holds the
// write lock (a downgrade) returns a context that stays valid after the
// write Unlock, for as long as the read hold lasts.
func (r *RWMutex) RLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, true, true)
}

// TryRLock is RLock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the write lock or a writer waits.
func (r *RWMutex) TryRLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, true, false)
}

// Lock acquires the write lock for ctx's owner, waiting until no other owner
// holds the read or the write lock, or until ctx ends (then it returns ctx's
// error). While it waits, new readers wait behind it.
//
// An owner that holds the read lock cannot upgrade: its Lock waits for its
// own read hold to end and so deadlocks with itself until ctx ends (and
// holds other new readers back meanwhile). Release the read lock first.
//
// It returns the write hold's context, with Mutex.Lock's rules.
func (r *RWMutex) Lock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, false, true)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the read or write lock, and when
// ctx's owner holds only the read lock (no upgrade).
func (r *RWMutex) TryLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, false, false)
}

func (r *RWMutex) lock(parent context.Context, read, wait bool) (context.Context, error) {
	if err := r.check(); err != nil {
		return parent, err
	}
	if err := parent.Err(); err != nil {
		return parent, err
	}
	ctx, o := ensureOwner(parent)
	hctx, next, err := r.try(ctx, o, read, wait)
	if err != nil {
		if wait {
			r.leave(ctx, o)
		}
		return parent, err
	}
	if hctx != nil {
		return hctx, nil
	}
	if !wait {
		return parent, r.wrap(ErrNotAcquired)
	}
	channel, policy := r.wchan, wakeOne
	if read {
		channel, policy = r.rchan, wakeAll
	}
	err = r.c.await(ctx, channel, policy, next, func() (bool, time.Duration, error) {
		hctx, next, err = r.try(ctx, o, read, true)
		return hctx != nil, next, err
	})
	if err != nil {
		r.leave(ctx, o)
		return parent, err
	}
	return hctx, nil
}

// leave takes o out of the waiting sets after a wait that ended without the
// lock, best-effort: a registration left behind expires with its deadline.
func (r *RWMutex) leave(ctx context.Context, o *owner) {
	cleanup(ctx, func(ctx context.Context) {
		o.mu.Lock()
		defer o.mu.Unlock()
		_ = lua.RWLeave.Run(ctx, r.c.rdb, r.keys, r.c.field(o), r.rchan, r.wchan).Err()
	})
}

// try runs the read or write lock script once, registering o as a waiter
// when wait is set. It returns the hold's context when o holds the lock, or
// the bound to wait before trying again.
func (r *RWMutex) try(ctx context.Context, o *owner, read, wait bool) (context.Context, time.Duration, error) {
	field := r.c.field(o)
	script, id := lua.RWLock, r.writeID(field)
	if read {
		script, id = lua.RWRLock, r.readID(field)
	}
	leaseMs := r.lease.Milliseconds()
	var waiterMs int64
	if wait {
		waiterMs = r.waiter.Milliseconds()
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	h := r.c.wd.get(id)
	count := 0
	if h != nil {
		count = h.count
	}
	// The script runs to completion even if ctx ends meanwhile (see Mutex).
	sent := time.Now()
	res, err := script.Run(context.WithoutCancel(ctx), r.c.rdb, r.keys, leaseMs, field, count, waiterMs).Int64Slice()
	if err != nil {
		return nil, 0, r.wrap(err)
	}
	if res[0] == 0 {
		next := bound(res[1], r.lease/3)
		if wait {
			next = min(next, r.waiter/3)
		}
		return nil, next, nil
	}
	if h != nil {
		h.count = int(res[1])
		r.c.wd.extend(h, sent)
		return ctx, 0, nil
	}

	h = &hold{
		id:      id,
		lease:   r.lease,
		renewed: r.renewed,
		count:   int(res[1]),
	}
	var hctx context.Context
	if read {
		h.renew = call{lua.RWRenewRead, r.keys[:2], []any{field, leaseMs}}
		h.release = call{lua.RWRUnlock, r.keys, []any{field, 1, leaseMs, r.wchan}}
		hctx, h.cancel = r.readContext(ctx)
	} else {
		h.renew = call{lua.RWRenewWrite, r.keys[:1], []any{field, leaseMs}}
		h.release = call{lua.RWUnlock, r.keys, []any{field, 1, leaseMs, r.rchan, r.wchan}}
		hctx, h.cancel = context.WithCancelCause(context.WithValue(ctx, rwWriteKey{r.c, r.name}, ctx))
	}
	h.ctx = hctx
	if !r.c.wd.add(h, sent) {
		h.cancel(ErrClosed)
		rctx, done := detach(ctx)
		defer done()
		rel := h.release
		_ = rel.script.Run(rctx, r.c.rdb, rel.keys, rel.args...).Err()
		return nil, 0, ErrClosed
	}
	return hctx, 0, nil
}

// readContext returns the context of a new read hold taken with ctx. Under
// the owner's write hold (a downgrade) it must outlive that hold's context:
// it keeps ctx's values but follows the cancellation of the context the
// write lock was taken with instead of ctx's.
func (r *RWMutex) readContext(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	wparent, ok := ctx.Value(rwWriteKey{r.c, r.name}).(context.Context)
	if !ok {
		return context.WithCancelCause(ctx)
	}
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(wparent, func() { cancel(context.Cause(wparent)) })
	return hctx, func(cause error) {
		stop() // nothing stays registered with the parent once the hold ends
		cancel(cause)
	}
}

// RUnlock releases one read hold of ctx's owner; the owner's last read hold
// ends its share, and the last share of the lock frees it and wakes a
// waiting writer. It returns an error wrapping ErrNotHeld, changing nothing,
// when the owner holds no read lock (including after its lease was lost). It
// works with a cancelled ctx.
func (r *RWMutex) RUnlock(ctx context.Context) error {
	return r.unlock(ctx, true)
}

// Unlock releases one write hold of ctx's owner. The last one lets in the
// readers that waited for it and wakes a writer; if the owner also took the
// read lock, it keeps it (downgrade). It returns an error wrapping
// ErrNotHeld, changing nothing, when the owner does not hold the write lock.
// It works with a cancelled ctx.
func (r *RWMutex) Unlock(ctx context.Context) error {
	return r.unlock(ctx, false)
}

func (r *RWMutex) unlock(ctx context.Context, read bool) error {
	if err := r.check(); err != nil {
		return err
	}
	o := ownerOf(ctx)
	if o == nil {
		return r.wrap(fmt.Errorf("%w (the context carries no owner)", ErrNotHeld))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	field := r.c.field(o)
	leaseMs := r.lease.Milliseconds()
	script, id := lua.RWUnlock, r.writeID(field)
	args := func(count int) []any { return []any{field, count, leaseMs, r.rchan, r.wchan} }
	if read {
		script, id = lua.RWRUnlock, r.readID(field)
		args = func(count int) []any { return []any{field, count, leaseMs, r.wchan} }
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	h := r.c.wd.get(id)
	if h == nil {
		// Not held as far as this process knows; clear what a lost or
		// abandoned hold of this owner may have left in Redis.
		n, err := script.Run(ctx, r.c.rdb, r.keys, args(1)...).Int64()
		if err != nil {
			return r.wrap(err)
		}
		if n == 2 {
			return nil
		}
		return r.wrap(ErrNotHeld)
	}
	err := r.c.wd.unhold(h, func(count int) (int64, error) {
		return script.Run(ctx, r.c.rdb, r.keys, args(count)...).Int64()
	})
	if err != nil {
		return r.wrap(err)
	}
	return nil
}

// info returns the lock's mode (0 free, 1 read, 2 write) and its number of
// live read holders.
func (r *RWMutex) info(ctx context.Context) (int64, int64, error) {
	if err := r.check(); err != nil {
		return 0, 0, err
	}
	res, err := lua.RWInfo.Run(ctx, r.c.rdb, r.keys[:2]).Int64Slice()
	if err != nil {
		return 0, 0, r.wrap(err)
	}
	return res[0], res[1], nil
}

// IsLocked reports whether any owner holds the read or the write lock.
func (r *RWMutex) IsLocked(ctx context.Context) (bool, error) {
	mode, _, err := r.info(ctx)
	return mode != 0, err
}

// IsWriteLocked reports whether an owner holds the write lock.
func (r *RWMutex) IsWriteLocked(ctx context.Context) (bool, error) {
	mode, _, err := r.info(ctx)
	return mode == 2, err
}

// Readers returns how many owners hold the read lock (with a lease still
// running), including a writer that took it too.
func (r *RWMutex) Readers(ctx context.Context) (int, error) {
	_, n, err := r.info(ctx)
	return int(n), err
}

// HoldCount returns how many write holds ctx's owner has (0 when none).
func (r *RWMutex) HoldCount(ctx context.Context) (int, error) {
	return r.count(ctx, "w:")
}

// RHoldCount returns how many read holds ctx's owner has (0 when none).
func (r *RWMutex) RHoldCount(ctx context.Context) (int, error) {
	return r.count(ctx, "r:")
}

func (r *RWMutex) count(ctx context.Context, prefix string) (int, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	o := ownerOf(ctx)
	if o == nil {
		return 0, nil
	}
	n, err := r.c.rdb.HGet(ctx, r.name, prefix+r.c.field(o)).Int()
	if err != nil {
		if isNil(err) {
			return 0, nil
		}
		return 0, r.wrap(err)
	}
	return n, nil
}

// ForceUnlock frees the lock, every read and write hold, and wakes its
// waiters, reporting whether it was held. Holders lose their leases: their
// contexts are cancelled with ErrLeaseLost (at once in this process, at their
// next renewal in others). A key of another type is refused and kept.
func (r *RWMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := r.check(); err != nil {
		return false, err
	}
	n, err := lua.RWForce.Run(ctx, r.c.rdb, r.keys[:2], r.rchan, r.wchan).Int64()
	if err != nil {
		return false, r.wrap(err)
	}
	r.c.wd.loseAll("rw-read\x00" + r.name + "\x00")
	r.c.wd.loseAll("rw-write\x00" + r.name + "\x00")
	return n == 1, nil
}
