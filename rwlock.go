package redisync

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/lua"
)

// RWMutex is a reentrant distributed read-write lock: many owners may hold
// the read lock at once, or one owner the write lock. Both are reentrant, and
// the holder of the write lock may also take the read lock (a downgrade:
// after its last Unlock it still holds the read lock). A reader may not
// upgrade: see Lock.
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
// Cluster slot, "{tag}:rw-readers:<name>", "{tag}:rw-writers:<name>",
// "{tag}:rw-waiting:<name>" and "{tag}:rw-admitted:<name>" (read leases,
// waiting writers, waiting and admitted readers; tag is the name's hash tag,
// or the name); none of them is left in Redis once the lock is free and
// nobody waits. WithFencing adds a counter, which stays.
//
// An RWMutex is a cheap handle, safe for concurrent use.
type RWMutex struct {
	c      *Client
	name   string
	keys   []string   // hash, read holders, waiting writers, waiting readers, admitted readers
	rchan  string     // wakes waiting readers (all of them)
	wchan  string     // wakes a waiting writer
	fence  string     // the fencing counter's key (WithFencing), or ""
	rspec  holds.Spec // read holds
	wspec  holds.Spec // write holds
	waiter time.Duration
	err    error

	// Made once, shared by every call (never written), as the Mutex's.
	lockKeys []string                                                                      // the write lock script's: keys, and the fencing counter's when fenced
	leaseMS  any                                                                           // the lease in milliseconds (both specs')
	waiterMS any                                                                           // waiter in milliseconds
	rchanArg any                                                                           // rchan
	wchanArg any                                                                           // wchan
	runlock  func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) // RUnlock's
	unlockFn func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) // Unlock's
}

// errUpgrade refuses a write Lock through a context that holds the read lock.
var errUpgrade = fmt.Errorf("%w: the context holds the read lock, and a reader cannot upgrade to the write lock (release the read lock first)", ErrNotAcquired)

// RWMutex returns a handle on the read-write lock name. Bad input (an empty
// name, a name whose companion keys cannot share its Cluster slot, a bad
// option) is reported by every method of the handle.
//
// Options (RWOption): WithLease or WithRenewedLease (read and write
// holds), WithFencing (write holds get tokens) and WithWaiterTimeout
// (waiting writers).
func (c *Client) RWMutex(name string, opts ...RWOption) *RWMutex {
	r := &RWMutex{c: c, name: name, waiter: DefaultWaiterTimeout}
	layout := []keyType{{name, "hash"}}
	if keys.Taggable(name) {
		r.keys = []string{
			name,
			keys.Companion(name, "rw-readers"),
			keys.Companion(name, "rw-writers"),
			keys.Companion(name, "rw-waiting"),
			keys.Companion(name, "rw-admitted"),
		}
		r.rchan = keys.Companion(name, "rw-wake-readers")
		r.wchan = keys.Companion(name, "rw-wake-writer")
		for _, k := range r.keys[1:] {
			layout = append(layout, keyType{k, "zset"})
		}
	}
	wrap := wrapFor(c, "rw lock", name, layout...)
	r.rspec.Wrap, r.wspec.Wrap = wrap, wrap
	if c == nil {
		r.err = wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return r
	}
	lc, err := lockSetup(name, opts)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: lock name %q has a \"}\" outside a hash tag", ErrInvalid, name)
	}
	r.err = wrap(err)
	d, renewed := lc.leaseOf(c)
	if lc.waiter > 0 {
		r.waiter = lc.waiter
	}
	if err == nil && lc.fence {
		r.fence = fenceKey(name)
		wrap = wrapFor(c, "rw lock", name, append(layout, keyType{r.fence, "string"})...)
	}
	r.rspec = holds.Spec{Ref: lease.Ref{Owner: c, Kind: string(KindRWRead), Name: name}, Lease: d, Renewed: renewed, Wrap: wrap}
	r.wspec = holds.Spec{Ref: lease.Ref{Owner: c, Kind: string(KindRWWrite), Name: name}, Lease: d, Renewed: renewed, Fenced: r.fence != "", Wrap: wrap}
	r.rspec.Busy, r.wspec.Busy = (*rwBusy)(r), (*rwBusy)(r)
	r.lockKeys = r.keys
	if r.fence != "" {
		r.lockKeys = append(r.keys[:len(r.keys):len(r.keys)], r.fence)
	}
	r.leaseMS, r.waiterMS, r.rchanArg, r.wchanArg = d.Milliseconds(), r.waiter.Milliseconds(), r.rchan, r.wchan
	r.runlock = func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
		return r.c.holds.ReleaseBy(ctx, r.unlockCall(lua.RWRUnlock, h, h.Arg(), count, h.Lease))
	}
	r.unlockFn = func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
		return r.c.holds.ReleaseBy(ctx, r.unlockCall(lua.RWUnlock, h, h.Arg(), count, h.Lease))
	}
	return r
}

// Name returns the lock's name, which is also the key of its hash.
func (r *RWMutex) Name() string { return r.name }

func (r *RWMutex) check(ctx context.Context) error {
	if r.err != nil {
		return r.err
	}
	return r.wrap(usable(ctx, r.c, r.wspec.Wrap))
}

func (r *RWMutex) wrap(err error) error { return wrapOr(r.wspec.Wrap, err) }

// RLock acquires the read lock, waiting while another owner holds the write
// lock or, unless ctx already holds the read lock, while a writer waits; if
// ctx ends first it returns an error wrapping ctx's error.
//
// It returns the read hold's context, with Mutex.Lock's rules. Through a
// context that holds the write lock, it takes the read lock for the same
// owner (a downgrade): the read hold's context then stays valid after the
// write Unlock, for as long as the read hold lasts, and the read hold is
// bound to the context the write hold was taken with.
func (r *RWMutex) RLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, ctx, true, true, false)
}

// TryRLock is RLock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the write lock or a writer waits.
func (r *RWMutex) TryRLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, ctx, true, false, false)
}

// TryRLockFor is RLock waiting at most wait (wait > 0): after it, it returns
// an error wrapping ErrNotAcquired, leaving nothing behind. A read hold it
// gets lasts as long as ctx.
func (r *RWMutex) TryRLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return r.lockFor(ctx, true, wait)
}

// Lock acquires the write lock, waiting until no other owner holds the read
// or the write lock, or until ctx ends (then it returns an error wrapping
// ctx's error). While it waits, new readers wait behind it.
//
// A context that holds the read lock cannot upgrade it: Lock and TryLock
// through it fail at once with an error wrapping ErrNotAcquired that says
// so, rather than waiting for the caller's own read hold to end (Redisson's
// RReadWriteLock deadlocks there). Release the read lock first.
//
// It returns the write hold's context, with Mutex.Lock's rules.
func (r *RWMutex) Lock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, ctx, false, true, false)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the read or write lock, and when
// ctx holds the read lock (no upgrade).
func (r *RWMutex) TryLock(ctx context.Context) (context.Context, error) {
	return r.lock(ctx, ctx, false, false, false)
}

// TryLockFor is Lock waiting at most wait (wait > 0): after it, it returns an
// error wrapping ErrNotAcquired, leaving nothing behind. A write hold it gets
// lasts as long as ctx.
func (r *RWMutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return r.lockFor(ctx, false, wait)
}

func (r *RWMutex) lockFor(ctx context.Context, read bool, wait time.Duration) (context.Context, error) {
	if err := r.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWait(wait); err != nil {
		return nil, r.wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return r.lock(ctx, wctx, read, true, true)
}

func (r *RWMutex) lock(parent, wctx context.Context, read, wait, bounded bool) (hctx context.Context, err error) {
	if err := r.check(parent); err != nil {
		return nil, err
	}
	if err := wctx.Err(); err != nil {
		return nil, r.wrap(errs.Wait(err, parent, bounded))
	}
	s, other := &r.wspec, &r.rspec
	script := lua.RWLock
	if read {
		s, other, script = &r.rspec, &r.wspec, lua.RWRLock
	}
	h, err := holds.Entry(parent, s.Ref)
	if err != nil {
		return nil, r.wrap(err)
	}
	if h != nil {
		unlock := lua.RWUnlock
		if read {
			unlock = lua.RWRUnlock
		}
		hctx, err := r.c.holds.Reenter(parent, wctx, wait, s, h, holds.Reentry{
			Calls: func(count int) []call { return []call{r.script(script, h, h.Arg(), "", count, false)} },
			Undo:  func(n int) []call { return []call{r.unlockCall(unlock, h, h.Arg(), n, h.Lease)} },
		})
		if err != nil {
			return nil, err
		}
		return hctx, nil
	}
	oh, err := holds.Entry(parent, other.Ref)
	if err != nil && read {
		return nil, r.wrap(err) // a downgrade of a write hold that ended
	}
	if oh != nil && !read {
		return nil, r.wrap(errUpgrade)
	}

	a := r.c.holds.BeginWith(s, parent, wctx, wait, (*rwScripts)(r))
	at := rwAttempt{r: r, a: a, s: s, script: script, read: read, wait: wait, writer: ""} // writer: a downgrade's write hold's field
	var ends []func() bool
	if oh != nil {
		// A downgrade: a read hold granted to the write hold's owner,
		// which outlives the write hold's context but not the context the
		// write hold was taken with, nor ctx when ctx ends on its own.
		at.writer, at.oh = oh.Field, oh
		// p names the deadline it ends by (its hold tells by it which end
		// came first: lease.Hold.Settle), though no timer of its own
		// ends it.
		p, cancel := context.WithCancelCause(namedDeadline{Context: context.WithoutCancel(parent), of: parent})
		stopW := context.AfterFunc(oh.Parent, func() { cancel(context.Cause(oh.Parent)) })
		// own follows parent (cancelled with it, in the same call when
		// parent's chain is the standard library's), and its methods do
		// not call parent's: ownEnd also runs in the write hold's end,
		// where the write hold's contexts wait for that end.
		own, stopOwnCtx := context.WithCancel(parent)
		ownEnd := func() {
			if own.Err() != nil { // parent ended by itself, not with the write hold
				cancel(context.Cause(own))
			}
		}
		stopOwn := context.AfterFunc(own, func() {
			if oh.Live() {
				ownEnd()
			}
		})
		// The callback above may run after the write hold has ended:
		// whether parent ended first is decided when the write hold ends,
		// before its context (and so parent, if derived from it) is
		// cancelled.
		oh.First(ownEnd)
		a.Parent = p
		ends = []func() bool{stopW, stopOwn, func() bool { cancel(nil); stopOwnCtx(); return true }}
		at.ends = ends
	}
	defer func() {
		if !a.Won {
			for _, stop := range ends {
				stop()
			}
		}
		err = a.Finish(err)
	}()
	done, next, err := at.try()
	if err == nil && !done && wait {
		channel, policy := r.wchan, notify.WakeOne
		if read {
			channel, policy = r.rchan, notify.WakeAll
		}
		w := at // the wait's, made only now
		err = r.c.holds.Await(wctx, channel, policy, next, w.try)
	}
	if err != nil {
		if wait {
			r.leave(a.Owner)
		}
		return nil, r.wrap(errs.Wait(err, parent, bounded))
	}
	if !a.Won {
		return nil, r.wrap(ErrNotAcquired)
	}
	return a.HoldCtx, nil
}

// rwAttempt is one call's first acquisition of a read or write hold: its
// attempts (try), and what they need.
type rwAttempt struct {
	r      *RWMutex
	a      *holds.Acquisition
	s      *holds.Spec
	script *lua.Script
	read   bool
	wait   bool
	writer string        // a downgrade's write hold's field, or ""
	oh     *lease.Hold   // a downgrade's write hold
	ends   []func() bool // what a downgrade's hold stops at its end
}

// writeEnded reports a downgrade whose write hold ended otherwise than by
// its Unlock (lost, forced) while the call went on: it is no downgrade
// any more, the read lock it would take could follow another writer's.
func (t *rwAttempt) writeEnded() error {
	if t.oh == nil {
		return nil
	}
	if why := t.oh.Reason(); why != lease.NotEnded && why != lease.EndUnlocked {
		return holds.EndedError(t.oh)
	}
	return nil
}

// try is one attempt.
func (t *rwAttempt) try() (bool, time.Duration, error) {
	r, a := t.r, t.a
	if err := t.writeEnded(); err != nil {
		return false, 0, err
	}
	var writer any = ""
	if t.writer != "" {
		writer = t.writer
	}
	field, res, d, err := a.Send(func(field string) call { return r.script(t.script, a.Room(), a.Arg(field), writer, 0, t.wait) })
	if res == nil {
		return false, d, err
	}
	if res[0] != 1 {
		next := lease.Bound(res[1], t.s.Lease/3)
		if t.wait {
			next = min(next, r.waiter/3)
		}
		return false, next, nil
	}
	if err := t.writeEnded(); err != nil {
		// Granted, but the write hold ended before the reply: the
		// script may have run once the write lock was gone from
		// Redis. (A write hold live now was there when it ran: its
		// local deadline comes before its lease ends in Redis.)
		r.c.holds.Undo(a.St.Sent, t.s.Lease, a.Give(field))
		return false, 0, err
	}
	renew := call{Script: lua.RWRenewWrite, Keys: r.keys[:1], Args: a.Args(a.Arg(field), r.leaseMS)}
	if t.read {
		renew = call{Script: lua.RWRenewRead, Keys: r.keys[:2], Args: a.Args(a.Arg(field), r.leaseMS)}
	}
	if len(t.ends) == 0 {
		return a.GrantOne(field, int(res[1]), renew)
	}
	return a.Grant(field, int(res[1]), []call{renew}, t.ends...)
}

// rwScripts is an RWMutex as the maker of its first acquisitions'
// give-backs and leaves (holds.Scripts, holds.Leaves).
type rwScripts RWMutex

// Release gives back a granted attempt of field, a read or a write hold
// as a's.
func (s *rwScripts) Release(a *holds.Acquisition, field string) call {
	unlock := lua.RWUnlock
	if a.Spec == &s.rspec {
		unlock = lua.RWRUnlock
	}
	return (*RWMutex)(s).unlockCall(unlock, a.Room(), a.Arg(field), 1, a.Spec.Lease)
}

// Left takes field out of the waiting sets.
func (s *rwScripts) Left(_ *holds.Acquisition, field string) []call {
	return []call{(*RWMutex)(s).leaveCall(field)}
}

// script is the read or write lock script's call for the field whose
// argument is field, with its hold count before the call, registering the
// caller as a waiter when wait is set, its arguments kept in room (a
// hold's, or an acquisition's Room); writer is the field of the write hold
// a first read hold downgrades ("" otherwise). The write lock script of a
// fenced lock also gets the fencing counter's key.
func (r *RWMutex) script(s *lua.Script, room *lease.Hold, field, writer any, count int, wait bool) call {
	var waiterMs any = 0
	if wait {
		waiterMs = r.waiterMS
	}
	keys := r.keys
	if s == lua.RWLock {
		keys = r.lockKeys
	}
	return call{Script: s, Keys: keys, Args: room.Args(r.leaseMS, field, count, waiterMs, writer, r.rchanArg)}
}

// unlockCall is the read (RWRUnlock) or write (RWUnlock) unlock script's
// call for the field whose argument is field, of a hold of lease d, with
// its hold count before the call, its arguments kept in room (a hold's, or
// an acquisition's Room).
func (r *RWMutex) unlockCall(unlock *lua.Script, room *lease.Hold, field any, count int, d time.Duration) call {
	lms := r.leaseMS
	if d != r.rspec.Lease {
		lms = d.Milliseconds()
	}
	return call{Script: unlock, Keys: r.keys, Args: room.Args(field, count, lms, publish, r.rchanArg, r.wchanArg)}
}

// leaveCall takes field out of the waiting sets.
func (r *RWMutex) leaveCall(field string) call {
	return call{Script: lua.RWLeave, Keys: r.keys, Args: []any{field, publish, r.rchan, r.wchan}}
}

// leave takes field out of the waiting sets after a wait that ended
// without the lock, best-effort: a registration left behind expires with
// its deadline.
func (r *RWMutex) leave(field string) { r.c.holds.Cleanup(r.waiter, r.leaveCall(field)) }

// RUnlock releases one read hold that ctx carries; the last one ends the
// owner's share, and the last share of the lock frees it and wakes a
// waiting writer. Its results, and its bound (the end of the context the
// hold was taken with, 5s at most), are Mutex.Unlock's. It works with a
// cancelled ctx.
func (r *RWMutex) RUnlock(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	return r.c.holds.Release(ctx, &r.rspec, 1, r.runlock)
}

// Unlock releases one write hold that ctx carries. The last one lets in the
// readers that waited for it and wakes a writer; if the owner also took the
// read lock, it keeps it (downgrade). Its results, and its bound (the end
// of the context the hold was taken with, 5s at most), are
// Mutex.Unlock's. It works with a cancelled ctx.
func (r *RWMutex) Unlock(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	return r.c.holds.Release(ctx, &r.wspec, 1, r.unlockFn)
}

// info returns the lock's mode (0 free, 1 read, 2 write) and its number of
// live read holders.
func (r *RWMutex) info(ctx context.Context) (int64, int64, error) {
	if err := r.check(ctx); err != nil {
		return 0, 0, err
	}
	res, err := r.c.tr.Do(ctx, call{Script: lua.RWInfo, Keys: r.keys[:2]}, nil).Int64Slice()
	if err != nil {
		return 0, 0, r.wrap(err)
	}
	return res[0], res[1], nil
}

// IsLocked reports whether any owner holds the read or the write lock.
// Holders says which, and who.
func (r *RWMutex) IsLocked(ctx context.Context) (bool, error) {
	mode, _, err := r.info(ctx)
	return mode != 0, err
}

// HoldCount returns how many write holds the hold ctx carries has (0 when
// ctx carries none).
func (r *RWMutex) HoldCount(ctx context.Context) (int, error) {
	return r.count(ctx, &r.wspec, "w:")
}

// RHoldCount returns how many read holds the hold ctx carries has (0 when
// ctx carries none).
func (r *RWMutex) RHoldCount(ctx context.Context) (int, error) {
	return r.count(ctx, &r.rspec, "r:")
}

func (r *RWMutex) count(ctx context.Context, s *holds.Spec, prefix string) (int, error) {
	if err := r.check(ctx); err != nil {
		return 0, err
	}
	h := holds.Held(ctx, s.Ref)
	if h == nil {
		return 0, nil
	}
	n, err := r.c.rdb.HGet(ctx, r.name, prefix+h.Field).Int()
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
// contexts are cancelled with ErrLeaseLost, in this process before the lock
// is freed, in others at their next renewal. A key of another type is
// refused and kept.
// When ctx ends before the script has answered, ForceUnlock returns ctx's
// error and the script may still run: until it has answered, this
// Client's new acquisitions of the lock wait for it (TryLock reports
// ErrNotAcquired), so none is freed by it.
func (r *RWMutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	k := call{Script: lua.RWForce, Keys: r.keys[:2], Args: []any{publish, r.rchan, r.wchan}}
	n, err := r.c.holds.ForceBy(ctx, k, r.rspec.Ref, r.wspec.Ref).Int64()
	if err != nil {
		return false, r.wrap(err)
	}
	return n == 1, nil
}

// namedDeadline is its Context with the deadline of another (of): a
// downgrade's context, which ends when the context of the write hold ends
// (not by a timer of its own), names the deadline that one ends by.
type namedDeadline struct {
	context.Context
	of context.Context
}

func (c namedDeadline) Deadline() (time.Time, bool) { return c.of.Deadline() }
