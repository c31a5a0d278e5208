package redisync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"

	"github.com/redisync-go/redisync/lua"
)

// MultiLock is several reentrant locks taken as one, all or none, as
// Redisson's RedissonMultiLock: a transfer between two accounts holds both.
// Each name is an ordinary Mutex in Redisson's RLock format (a hash at the
// name, field "<client uuid>:<n>" → hold count, unlock message "0" on
// Redisson's channel for the name), so a Mutex, or a Redisson RLock, on
// any of the names excludes the MultiLock, and the MultiLock excludes it.
//
// The names of one Redis Cluster slot, or all of them on a single node or
// Sentinel, are taken by one script, all or none. Names in several slots
// are taken slot by slot, in one global order (by slot, then by name), and
// an attempt that finds one of them held gives back those it took before
// it waits, so two MultiLocks over overlapping names never deadlock, nor
// does a MultiLock with a Mutex holder that wants more of its names.
//
// A hold of a MultiLock is one hold, with the Mutex's rules (see Lock):
// one context, live exactly while every name is held; one lease kept by
// the watchdog for all the names (one renewal per slot, in the watchdog's
// batches); losing any of the names ends the hold (its context is
// cancelled with ErrLeaseLost) and gives back the others. A
// Mutex.ForceUnlock of one of the names ends it so too, in the
// ForceUnlock's process before the name is freed, elsewhere at the next
// renewal. A MultiLock
// hold's context does not re-enter a Mutex of one of its names, nor a
// Mutex's hold context a MultiLock: they are different locks, and such a
// Lock waits for the caller's own hold, as another owner would. MultiLock
// does not hand locks over to local waiters (the Mutex's cohort handoff).
//
// A MultiLock is a cheap handle, safe for concurrent use.
type MultiLock struct {
	c      *Client
	names  []string     // sorted
	groups []multiGroup // in the order they are taken
	spec   holds.Spec
	err    error
}

// multiGroup is a MultiLock's names in one slot (all of them off a
// Cluster): what one script takes.
type multiGroup struct {
	slot     int
	keys     []string // its names, sorted
	channels []string // their unlock channels, in the same order
	fences   []string // their fencing counters (WithFencing), in the same order
}

// MultiLock returns a handle on the locks names taken as one (see the
// type). The order of names does not matter. Bad input (no names, an
// empty or duplicated name, a name whose unlock channel is in another
// Cluster slot, a bad option) is reported by every method of the handle,
// as an error wrapping ErrInvalid. Options (MultiLockOption): WithLease or
// WithRenewedLease, and WithFencing (see MultiLock.Token).
func (c *Client) MultiLock(names []string, opts ...MultiLockOption) *MultiLock {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	m := &MultiLock{c: c, names: sorted}
	layout := make([]keyType, len(sorted))
	for i, n := range sorted {
		layout[i] = keyType{n, "hash"}
	}
	ref := multiRef(sorted)
	m.spec.Wrap = wrapLabelled(c, "multilock", ref, ref, layout...)
	if c == nil {
		m.err = m.spec.Wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return m
	}
	lc, err := m.setup(opts)
	if err == nil && lc.fence {
		m.spec.Fenced = true
		for _, n := range sorted {
			layout = append(layout, keyType{fenceKey(n), "string"})
		}
		m.spec.Wrap = wrapLabelled(c, "multilock", ref, ref, layout...)
	}
	m.err = m.spec.Wrap(err)
	m.spec.Ref = lease.Ref{Owner: c, Kind: string(KindMultiLock), Name: ref}
	m.spec.Busy = (*multiBusy)(m)
	m.spec.Parts = true
	for _, n := range sorted {
		m.spec.Covers = append(m.spec.Covers, lease.Ref{Owner: c, Kind: string(KindMutex), Name: n})
	}
	m.spec.Lease, m.spec.Renewed = lc.leaseOf(c)
	return m
}

// setup validates the names and options and groups the names by slot.
func (m *MultiLock) setup(opts []MultiLockOption) (lockConfig, error) {
	if len(m.names) == 0 {
		return lockConfig{}, fmt.Errorf("%w: no names", ErrInvalid)
	}
	for i, name := range m.names {
		if err := checkName(name); err != nil {
			return lockConfig{}, err
		}
		if i > 0 && name == m.names[i-1] {
			return lockConfig{}, fmt.Errorf("%w: name %q is given twice", ErrInvalid, name)
		}
	}
	lc, err := lockSetup(m.names[0], opts)
	if err != nil {
		return lc, err
	}
	bySlot := map[int]*multiGroup{}
	for _, name := range m.names {
		channel := multiChannel(name)
		slot := m.c.tr.Route(name)
		if m.c.tr.Route(channel) != slot {
			return lc, fmt.Errorf("%w: on a Cluster, name %q and its unlock channel %q (Redisson's naming) hash to different slots", ErrInvalid, name, channel)
		}
		g := bySlot[slot]
		if g == nil {
			g = &multiGroup{slot: slot}
			bySlot[slot] = g
		}
		g.keys = append(g.keys, name)
	}
	for _, g := range bySlot {
		for _, name := range g.keys {
			g.channels = append(g.channels, multiChannel(name))
			if lc.fence {
				if err := fencingSetup(name, lc, nil); err != nil {
					return lc, err
				}
				g.fences = append(g.fences, fenceKey(name))
			}
		}
		m.groups = append(m.groups, *g)
	}
	// The global order: by slot, then by name (the names of a group are
	// sorted already, and no two groups share a slot).
	slices.SortFunc(m.groups, func(a, b multiGroup) int { return a.slot - b.slot })
	return lc, nil
}

// multiChannel is the channel of one name's unlock messages: Redisson's.
func multiChannel(name string) string { return redissonName("redisson_lock__channel", name) }

// multiRef names a MultiLock, in its hold's key in contexts, its errors
// and HoldEvent.Name: the sorted names, each quoted (strconv.Quote),
// separated by ", ", so that two different sets never share it.
func multiRef(sorted []string) string {
	q := make([]string, len(sorted))
	for i, n := range sorted {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// Names returns the lock's names, sorted (none for a nil handle).
func (m *MultiLock) Names() []string {
	if m == nil {
		return nil
	}
	return slices.Clone(m.names)
}

func (m *MultiLock) check(ctx context.Context) error {
	if m == nil {
		return fmt.Errorf("%w: nil MultiLock", ErrInvalid)
	}
	if m.err != nil {
		return m.err
	}
	return m.wrap(usable(ctx, m.c, m.spec.Wrap))
}

func (m *MultiLock) wrap(err error) error { return wrapOr(m.spec.Wrap, err) }

// Lock acquires every lock of the MultiLock, all or none, waiting until
// they are all free or ctx ends (then it returns an error that wraps ctx's
// error). It waits on the unlock channel of the name it found held, woken
// by its unlock message and bounded by its holder's lease, and holds none
// of the names while it waits.
//
// It returns the hold's context, with Mutex.Lock's rules: a nested Lock of
// this MultiLock (the same names, in any order) with it re-enters; the
// hold ends at its last Unlock, when its lease is lost from any of the
// names (the context is then cancelled with cause ErrLeaseLost, and the
// other names are given back), or when ctx ends, and then every name is
// released in Redis. While the hold's context is live the owner holds
// every name; once it is done it holds none. On error, Lock returns a nil
// context.
func (m *MultiLock) Lock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, ctx, true, false)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds any of the names, leaving none
// of them taken.
func (m *MultiLock) TryLock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, ctx, false, false)
}

// TryLockFor is Lock waiting at most wait (wait > 0): after it, it returns
// an error wrapping ErrNotAcquired, leaving nothing behind. The bound is
// on the wait only: a hold it gets lasts as Lock's does.
func (m *MultiLock) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWait(wait); err != nil {
		return nil, m.wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return m.lock(ctx, wctx, true, true)
}

// errBlockerMoved ends a wait on one name's channel when the next attempt
// finds another name held: the wait goes on on that one's channel.
var errBlockerMoved = errors.New("redisync: another name of the MultiLock is held")

// lock acquires for a hold bound to parent, waiting (if wait) as long as
// wctx lasts; bounded says wctx is TryLockFor's.
func (m *MultiLock) lock(parent, wctx context.Context, wait, bounded bool) (hctx context.Context, err error) {
	if err := m.check(parent); err != nil {
		return nil, err
	}
	if err := wctx.Err(); err != nil {
		return nil, m.wrap(errs.Wait(err, parent, bounded))
	}
	h, err := holds.Entry(parent, m.spec.Ref)
	if err != nil {
		return nil, m.wrap(err)
	}
	leaseMs := m.spec.Lease.Milliseconds()
	if h != nil {
		hctx, err := m.c.holds.Reenter(parent, wctx, wait, &m.spec, h, holds.Reentry{
			Calls: func(count int) []call {
				calls := make([]call, len(m.groups))
				for i, g := range m.groups {
					calls[i] = script(lua.MultiLock, g.keys, leaseMs, h.Field, count)
				}
				return calls
			},
			Undo:  func(n int) []call { return m.unlockCalls(h.Field, n) },
			Batch: true,
		})
		if err != nil {
			return nil, err
		}
		return hctx, nil
	}

	a := m.c.holds.Begin(&m.spec, parent, wctx, wait, nil, nil)
	a.Releases = func(field string) []call { return m.unlockCalls(field, 1) }
	defer func() { err = a.Finish(err) }()
	blocker := m.names[0] // the name the latest attempt found held
	try := func() (bool, time.Duration, error) {
		field := a.Owner
		var first lease.Stamp
		var tokens map[string]int64 // WithFencing: by name
		for i := range m.groups {
			g := &m.groups[i]
			_, r, d, err := a.Send(func(field string) call { return g.first(leaseMs, field) })
			if r == nil || r[0] != 1 {
				// Not taken (or not known to be): what the attempt
				// took in the slots before is given back first.
				if gerr := m.takeBack(a, field, i, err != nil); gerr != nil && err == nil {
					err = gerr
				}
				if r == nil && err == nil && a.Dirty && i > 0 && a.Owner == field {
					// This slot's script may have run (its reply was
					// lost): what it took is not given back by the
					// next attempt, which may wait at an earlier slot.
					// The owner changes, and the old one is swept.
					m.c.holds.Sweep(m.spec.Lease, a.All(field)...)
					a.Owner, a.Dirty = m.c.holds.NewField(), false
				}
				if r == nil || err != nil {
					return false, d, err
				}
				blocker = g.keys[r[2]-1]
				return false, lease.Bound(r[1], m.spec.Lease/3), nil
			}
			if i == 0 {
				first = a.St // its lease counts from the first slot's script
			}
			if m.spec.Fenced {
				if len(r) != 2+len(g.keys) {
					return false, 0, fmt.Errorf("redisync: unexpected reply %v", r)
				}
				if tokens == nil {
					tokens = make(map[string]int64, len(m.names))
				}
				for j, name := range g.keys {
					tokens[name] = r[2+j]
				}
			}
		}
		a.St = first
		renew := make([]call, len(m.groups))
		for i, g := range m.groups {
			renew[i] = script(lua.MultiRenew, g.keys, field, leaseMs)
		}
		a.Tokens = tokens
		return a.Grant(field, 1, renew)
	}

	done, next, err := try()
	if err != nil {
		return nil, m.wrap(errs.Wait(err, parent, bounded))
	}
	if done {
		return a.HoldCtx, nil
	}
	if !wait {
		return nil, m.wrap(ErrNotAcquired)
	}
	for {
		on := blocker
		channel := multiChannel(on)
		// In line with the Mutex waiters of the name in this Client, so
		// that they are not handed it past this waiter (internal/cohort).
		err = m.c.holds.AwaitFrom(wctx, notify.Mark{}, channel, notify.WakeOne, next, func() (bool, time.Duration, error) {
			done, n, err := try()
			if err == nil && !done && blocker != on {
				next = n
				return false, 0, errBlockerMoved
			}
			return done, n, err
		}, false, cohort.Blocking(on))
		if !errors.Is(err, errBlockerMoved) {
			break
		}
		// The wake-up this waiter took on channel may be one that a
		// waiter of that name behind it can use.
		m.c.ps.Nudge(channel)
	}
	if err != nil {
		return nil, m.wrap(errs.Wait(err, parent, bounded))
	}
	return a.HoldCtx, nil
}

// first is the lock script's call for a first hold of g's names by
// field: with their fencing counters when fenced (each gets its token).
func (g *multiGroup) first(leaseMs int64, field string) call {
	if len(g.fences) == 0 {
		return script(lua.MultiLock, g.keys, leaseMs, field, 0)
	}
	keys := append(slices.Clip(g.keys), g.fences...)
	return script(lua.MultiLock, keys, leaseMs, field, 0, len(g.keys))
}

// takeBack gives back what an attempt of field took in the slots before
// the i-th, which did not grant. When the call fails anyway (failing), it
// is sent without waiting; otherwise the caller is about to wait or try
// again as the same owner, so it waits for the give-back: a give-back
// that ran after the next attempt would free what that attempt took. When
// that is not known to have run (an error, or wctx ended), the owner
// changes, and the old one is swept. It returns wctx's error if wctx
// ended.
func (m *MultiLock) takeBack(a *holds.Acquisition, field string, i int, failing bool) error {
	if i == 0 {
		return nil
	}
	calls := m.unlockCallsOf(m.groups[:i], field, 1)
	if failing {
		m.c.holds.Undo(a.St.Sent, m.spec.Lease, calls...)
		return nil
	}
	for _, r := range m.c.tr.DoAll(a.WaitCtx, calls) {
		if r.Err() != nil {
			m.c.holds.Sweep(m.spec.Lease, a.All(field)...)
			if a.Owner == field {
				a.Owner, a.Dirty = m.c.holds.NewField(), false
			}
			break
		}
	}
	return a.WaitCtx.Err()
}

// unlockCalls returns the calls that release the hold of field with count
// holds by one, one per slot.
func (m *MultiLock) unlockCalls(field string, count int) []call {
	return m.unlockCallsOf(m.groups, field, count)
}

func (m *MultiLock) unlockCallsOf(groups []multiGroup, field string, count int) []call {
	calls := make([]call, len(groups))
	for i, g := range groups {
		args := []any{field, count, m.spec.Lease.Milliseconds(), publish, unlockMessage}
		for _, ch := range g.channels {
			args = append(args, ch)
		}
		calls[i] = script(lua.MultiUnlock, g.keys, args...)
	}
	return calls
}

// Unlock releases one hold of the MultiLock that ctx carries; at the last
// one every name is freed, each with its unlock message (the hold's
// context is cancelled first). It works with a cancelled ctx. Its results
// are Mutex.Unlock's: nil when the hold already ended with the context it
// was taken with, an error wrapping ErrNotHeld when ctx carries no hold of
// this MultiLock (the same names) or a hold that ended, also wrapping
// ErrLeaseLost when it was lost from any of the names (the others are
// then freed too), told as Mutex.Unlock tells it: by the hold's local
// deadline, or by what Redis no longer has. After
// another error on the last hold, the hold has ended and redisync retries
// the release in the background. It returns by the end of the context the
// hold was taken with at the latest, and within 5s, with the results
// Mutex.Unlock has then (nil once that context has ended: the release goes
// on in the background).
func (m *MultiLock) Unlock(ctx context.Context) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	return m.c.holds.Release(ctx, &m.spec, 1, func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
		calls := m.unlockCalls(h.Field, count)
		if len(calls) == 1 {
			return m.c.holds.ReleaseBy(ctx, calls[0])
		}
		// 0 (lost) from any slot, else holds.GoneAt (the last hold lost) from
		// any, else 1 (holds remain) from any, else 2 (released); dated
		// by the earliest send.
		var res int64 = 2
		var sent time.Time
		for _, r := range m.c.tr.DoAll(ctx, calls) {
			n, err := r.Int64()
			if err != nil {
				return 0, r.Sent, err
			}
			if sent.IsZero() || r.Sent.Before(sent) {
				sent = r.Sent
			}
			if n == holds.GoneAt && !holds.GoneInTime(h) {
				n = 2 // lapsed after the Unlock began (see goneInTime)
			}
			switch {
			case n == 0 || res == 0:
				res = 0
			case n == holds.GoneAt || res == holds.GoneAt:
				res = holds.GoneAt
			case n == 1:
				res = 1
			}
		}
		return res, sent, nil
	})
}
