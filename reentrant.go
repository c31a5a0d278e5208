package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// unlockMessage is what Redisson publishes when an RLock is freed.
const unlockMessage = "0"

// Mutex is a reentrant distributed lock. It is stored the way Redisson's RLock
// stores it (a hash at the key name, field "<client uuid>:<n>" → hold count,
// unlock message "0" on Redisson's channel for the name,
// "redisson_lock__channel:{name}" or, for a name containing "{",
// "redisson_lock__channel:name"), so Go services and Java services using
// Redisson can guard the same resource. WithFencing adds a key, the fencing
// counter, which Redisson neither reads nor writes.
//
// A Mutex is a cheap handle, safe for concurrent use: the owner is the
// hold's, never the handle's (see Lock).
type Mutex struct {
	c       *Client
	name    string
	channel string
	fence   string // the fencing counter's key (WithFencing), or ""
	spec    holds.Spec
	err     error // bad name or option, returned by every method

	// Made once, shared by every call (never written): the scripts' keys
	// and the arguments every call boxes the same, so an uncontended
	// Lock+Unlock does not allocate them again (issue 34).
	keys    []string                                                                      // {name}
	fkeys   []string                                                                      // the lock script's: {name} or {name, fence}
	chanArg any                                                                           // channel
	leaseMS any                                                                           // spec.Lease in milliseconds
	release func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) // Unlock's, made once
}

// Mutex returns a handle on the reentrant lock name. Bad input (an empty
// name, a bad option) is reported by every method of the handle.
//
// Options (MutexOption): WithLease or WithRenewedLease, and WithFencing.
func (c *Client) Mutex(name string, opts ...MutexOption) *Mutex {
	m := &Mutex{c: c, name: name, channel: redissonName("redisson_lock__channel", name)}
	m.spec.Wrap = wrapFor(c, "lock", name, keyType{name, "hash"})
	if c == nil {
		m.err = m.spec.Wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return m
	}
	lc, err := lockSetup(name, opts)
	if err = fencingSetup(name, lc, err); err == nil && lc.fence {
		m.fence, m.spec.Fenced = fenceKey(name), true
		m.spec.Wrap = wrapFor(c, "lock", name, keyType{name, "hash"}, keyType{m.fence, "string"})
	}
	if err == nil && c.tr.Route(m.channel) != c.tr.Route(name) {
		err = fmt.Errorf("%w: on a Cluster, name %q and its unlock channel %q (Redisson's naming) hash to different slots", ErrInvalid, name, m.channel)
	}
	m.err = m.spec.Wrap(err)
	m.spec.Ref = lease.Ref{Owner: c, Kind: string(KindMutex), Name: name}
	m.spec.Busy = (*mutexBusy)(m)
	m.spec.Lease, m.spec.Renewed = lc.leaseOf(c)
	m.spec.Counts = !m.spec.Fenced // lua/lock.lua's replies
	m.keys = []string{name}
	m.fkeys = m.keys
	if m.fence != "" {
		m.fkeys = []string{name, m.fence}
	}
	m.chanArg, m.leaseMS = m.channel, m.spec.Lease.Milliseconds()
	m.release = m.releaseHold
	return m
}

// Name returns the lock's name, which is also its Redis key.
func (m *Mutex) Name() string { return m.name }

func (m *Mutex) check(ctx context.Context) error {
	if m.err != nil {
		return m.err
	}
	return m.wrap(usable(ctx, m.c, m.spec.Wrap))
}

func (m *Mutex) wrap(err error) error { return wrapOr(m.spec.Wrap, err) }

// Lock acquires the lock, waiting until it is free or ctx ends (then it
// returns an error that wraps ctx's error and names the lock, and, when
// Redis had not answered the wait's latest attempts, wraps the last error
// they met and says how long the last one had no reply; when Redis
// answered them, the lock was busy, and the error says who holds it: the
// holder's Client.ID and the lease left, read once more then). Every wait
// of the package ends so (TryLockFor's, an RLock's, an Acquire's, a
// Campaign's, ...); TryLock, which does not wait, reads nothing more.
//
// It returns the hold's context, derived from ctx: pass it down, and a
// nested Lock of this lock with it (or with a context derived from it)
// re-enters, returning a context that ends with the hold; pass it to
// Unlock. A context that carries no hold of this lock gets a fresh owner,
// so goroutines sharing the handle, or a hold of another lock, exclude each
// other.
//
// The hold lasts until its last Unlock, until its lease is lost (the hold's
// context is then cancelled with cause ErrLeaseLost), or until ctx ends:
// then redisync releases the lock in Redis and wakes a waiter, so a lock
// never outlives the context it was taken with. While the hold's context is
// live the owner holds the lock; once it is done the owner does not: from
// the moment the hold's local deadline has passed, its Err reports the
// loss (cause ErrLeaseLost) even before any timer has run (see the package
// documentation). A re-entry's context also ends with the context given to
// it, but the re-entry counts until its Unlock. To bound only the wait,
// use TryLockFor.
//
// On error, Lock returns a nil context, never ctx: a caller that drops
// the error holds nothing that looks like a hold. So do TryLock and
// TryLockFor, and every call of the package that returns a hold's
// context.
func (m *Mutex) Lock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, ctx, true, false)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the lock.
func (m *Mutex) TryLock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, ctx, false, false)
}

// TryLockFor is Lock waiting at most wait (wait > 0): after it, it returns an
// error wrapping ErrNotAcquired, leaving nothing behind. The bound is on the
// wait only: a hold it gets lasts as Lock's does, as long as ctx.
func (m *Mutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
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

// checkWait refuses a wait bound that is not positive.
func checkWait(wait time.Duration) error {
	if wait <= 0 {
		return fmt.Errorf("%w: wait %v is not positive", ErrInvalid, wait)
	}
	return nil
}

// lock acquires for a hold bound to parent, waiting (if wait) as long as
// wctx lasts; bounded says wctx is TryLockFor's.
func (m *Mutex) lock(parent, wctx context.Context, wait, bounded bool) (hctx context.Context, err error) {
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
	if h != nil {
		hctx, err := m.c.holds.Reenter(parent, wctx, wait, &m.spec, h, holds.Reentry{
			Calls: func(count int) []call {
				return []call{{Script: lua.Lock, Keys: m.fkeys, Args: h.Args(m.leaseMS, h.Arg(), count)}}
			},
			Undo: func(n int) []call {
				return []call{m.unlockCall(h, n)}
			},
		})
		if err != nil {
			return nil, err
		}
		return hctx, nil
	}

	a := m.c.holds.BeginWith(&m.spec, parent, wctx, wait, (*mutexScripts)(m))
	defer func() { err = a.Finish(err) }()

	// Local waiters queued before this call are woken first (one per
	// unlock message), so a new call that finds them queues behind them
	// rather than trying: fair among the goroutines of one process, and
	// one failing round trip fewer per acquisition under contention. Its
	// wait is still bounded by the holder's lease as last seen.
	var mk notify.Mark
	var next time.Duration
	queued := false
	if wait {
		var until time.Time
		mk, queued, until = m.c.ps.Mark(m.channel)
		if y, yielding := m.c.co.KeyYielding(m.name, time.Now()); yielding {
			queued, until = true, y // other clients' turn (internal/cohort)
		}
		next = time.Until(until)
		queued = queued && next > 0
	}
	if !queued {
		done, n, err := m.try(a)
		if err != nil {
			return nil, m.wrap(errs.Wait(err, parent, bounded))
		}
		if done {
			return a.HoldCtx, nil
		}
		if !wait {
			return nil, m.wrap(ErrNotAcquired)
		}
		next = n
	}
	// The wait: made only now, for an acquisition that waits.
	try := func() (bool, time.Duration, error) { return m.try(a) }
	handed := false
	acc := &cohort.Acceptor{
		Key:     m.name,
		Lease:   m.spec.Lease,
		Renewed: m.spec.Renewed,
		Fence:   m.fence,
		Field:   func() string { return a.Owner },
		Release: a.Give,
		Take: func(h *cohort.Handoff) (bool, time.Duration, error) {
			switch {
			case errors.Is(h.Err, ErrNotReplicated):
				return false, 0, h.Err // given back by the releaser
			case errors.Is(h.Err, holds.ErrHandoffLeft):
				// Its late grant is given back (and swept): not adopted.
				return a.Granted(h.Field, nil, holds.ErrUntrusted)
			case h.Err != nil:
				a.Dirty = true // it may hold the lock: the next try adopts it
				return false, 0, nil
			case !h.Granted:
				return false, h.Next, nil
			}
			if h.Field != a.Owner && a.Dirty {
				// Handed the releaser's field in memory: what this
				// waiter's own attempts may have left is swept.
				m.c.holds.Sweep(m.spec.Lease, a.All(a.Owner)...)
				a.Dirty = false
			}
			a.St, a.Token, handed = h.St, holds.FenceToken(a.Spec, h.Reply), true
			return a.GrantOne(h.Field, 1, m.renewCall(a, h.Field))
		},
	}
	if err := m.c.holds.AwaitFrom(wctx, mk, m.channel, notify.WakeOne, next, try, false, acc); err != nil {
		return nil, m.wrap(errs.Wait(err, parent, bounded))
	}
	if !handed {
		m.c.ps.Rotate(m.channel)
	}
	return a.HoldCtx, nil
}

// try is one attempt of a's first acquisition.
func (m *Mutex) try(a *holds.Acquisition) (bool, time.Duration, error) {
	field, r, d, err := a.Send(func(field string) call {
		return call{Script: lua.Lock, Keys: m.fkeys, Args: a.Args(m.leaseMS, a.Arg(field), 0)}
	})
	if r == nil {
		return false, d, err
	}
	if r[0] != 1 {
		if r[0] == 0 {
			// Held: perhaps by a hold this Client released, which a
			// failover kept (see holds.HealFor).
			m.c.holds.HealFor(m.spec.Ref, time.Duration(r[1])*time.Millisecond)
		}
		return false, lease.Bound(r[1], m.spec.Lease/3), nil
	}
	return a.GrantOne(field, int(r[1]), m.renewCall(a, field))
}

// renewCall is the renewal script's call for a hold of field taken by a.
func (m *Mutex) renewCall(a *holds.Acquisition, field string) call {
	return call{Script: lua.Renew, Keys: m.keys, Args: a.Args(a.Arg(field), m.leaseMS)}
}

// mutexScripts is a Mutex as the maker of its first acquisitions'
// give-backs (holds.Scripts).
type mutexScripts Mutex

// Release gives back a granted attempt of field.
func (s *mutexScripts) Release(a *holds.Acquisition, field string) call {
	return call{Script: lua.Drop, Keys: s.keys, Args: a.Args(a.Arg(field), publish, unlockMessage, s.chanArg)}
}

// unlockCall is the unlock script's call for h with its hold count
// before the call.
func (m *Mutex) unlockCall(h *lease.Hold, count int) call {
	lms := m.leaseMS
	if h.Lease != m.spec.Lease {
		lms = h.Lease.Milliseconds()
	}
	return call{Script: lua.Unlock, Keys: m.keys, Args: h.Args(h.Arg(), count, lms, publish, unlockMessage, m.chanArg)}
}

// Unlock releases one hold of the lock that ctx carries; the lock is freed,
// and one waiter woken, when the last hold is released (the hold's context
// is then cancelled, before the lock is free). It works with a cancelled
// ctx.
//
// When another goroutine of this Client waits for the lock, the last
// Unlock hands the lock straight to it, and the lock is never free in
// between (cohort handoff): in memory, with no round trip, keeping the
// Redis owner field and the lease's deadline, unless the waiter needs a
// fencing token, a replica acknowledgement or a fixed lease of its own
// (then in one script). Waiters in other clients still get their turn:
// after at most 16 handoffs in a row, or 5ms, the lock is freed for them
// if one waits, and this Client's waiters hold back for a millisecond so
// that one of them takes it. An Unlock that hands over in memory sends
// nothing: when Redis lost the hold early, the new holder is told at its
// next renewal, not this Unlock.
//
// It returns nil, at once, when the hold already ended with the context it
// was taken with: the hold was the caller's until then, and redisync
// releases it in Redis from that moment, in the background (behind any
// call through the hold still waiting for its reply; the lease frees it at
// the latest), so the lock may still be held there for a while after that
// nil. It returns an error wrapping ErrNotHeld when
// ctx carries no hold of the lock, a hold already released, or a hold whose
// lease was lost (that error also wraps ErrLeaseLost, and whatever Redis
// still kept of the hold is cleared). The hold's local deadline decides
// whether it was lost: a hold whose deadline had passed when Unlock was
// called (its process was stopped past its lease, say) was lost, even if
// no timer has told it yet, and Unlock says so. So was a hold that Redis
// lost before its deadline (another process forced it, Redis lost its
// data, a key deleted by hand): a last release that finds it gone in Redis
// says so too, unless go-redis wrote that release twice (a retry after a
// network error, which finds the hold its first write released: nil). Where
// a write must never follow a lost hold, check a fencing token
// (WithFencing). After another error on the last hold (Redis
// unreachable), the hold has ended: redisync retries the release in the
// background, and Redis frees the lock when its lease ends at the latest.
//
// Unlock returns by the end of the context the hold was taken with at the
// latest, and within 5s whatever that is. When that context ends before
// Redis has answered (a request's deadline passing while the link is silent
// or Redis refuses connections), the hold has ended with it, and Unlock
// returns nil then, as for a hold that had already ended with its context:
// the hold was the caller's until that end; the release goes on in the
// background, and the lease frees the lock at the latest. A loss that only
// Redis's reply would have shown (a hold Redis lost before its deadline)
// is then not reported. When Redis has not answered within 5s while that
// context lives (a silent link), Unlock returns an error; a release that
// is not the last then counts once its reply comes.
func (m *Mutex) Unlock(ctx context.Context) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	return m.c.holds.Release(ctx, &m.spec, 1, m.release)
}

// releaseHold releases h, whose count is count, for Unlock (holds.Release's
// send): to a local waiter (see handOver), or in Redis.
func (m *Mutex) releaseHold(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
	if count == 1 && !m.c.noCohort {
		if ho, mine := m.c.co.Claim(m.name, m.c.ps.ConfirmedOn(m.channel)); ho != nil {
			return m.handOver(ctx, h, ho, mine)
		}
	}
	return m.c.holds.ReleaseBy(ctx, m.unlockCall(h, count))
}

// handOver hands the lock from h, releasing its last hold, to the local
// waiter reserved by ho (internal/cohort), or at the end of a run of handoffs
// releases it for other clients; it reports h released (2), or lost
// (holds.GoneAt) when Redis no longer had h's hold and the call was written
// once (see writes). mine is this client's subscriptions to the channel.
func (m *Mutex) handOver(ctx context.Context, h *lease.Hold, ho *cohort.Handoff, mine int) (int64, time.Time, error) {
	if m.handInMemory(h, ho) {
		return 2, time.Time{}, nil
	}
	ho.Release = ho.Acc.Release(ho.Field)
	ho.St = m.c.holds.Stamp(&m.spec)
	ho.St.Handoff = true
	pub := m.c.mode.Publish()
	count := ""
	if ho.Bounded {
		count = m.c.mode.SubCounter(pub)
	}
	keys := []string{m.name}
	if ho.Acc.Fence != "" {
		keys = append(keys, ho.Acc.Fence)
	}
	k := script(lua.Handoff, keys, h.Field, ho.Field, ho.Acc.Lease.Milliseconds(), count, pub, unlockMessage, mine, m.channel)
	k.Takes, k.Direct = true, true // a release: bounded by ctx, holds.ReleaseTimeout
	// When the releaser leaves first (no reply within holds.ReleaseTimeout),
	// the script may still run: what it granted is given back when its
	// reply comes, and the receiver waits on as a new owner
	// (holds.ErrHandoffLeft), so that the grant is nobody's.
	rep := m.c.tr.Do(ctx, k, func(r reply) {
		if v, err := r.Int64Slice(); err == nil && len(v) > 0 && v[0] == 1 {
			m.c.holds.Undo(r.Sent, ho.Acc.Lease, ho.Release)
		}
	})
	ho.St.Sent = rep.Sent
	r, err := m.c.holds.Acquired(rep)
	herr := err // what the receiver is told
	if rep.Gone {
		herr = holds.ErrHandoffLeft
	}
	if nr := holds.NotReplicated(err); nr != nil {
		// WithReplicaAck: the receiver's grant was not acknowledged;
		// take it back, and the receiver's call fails as its own
		// attempt would have. ErrNotReplicated promises the undo is
		// done when the receiver's call returns, and settle below is
		// what lets it return: wait for the undo first (ctx is the
		// release's, detached, so holds.ReleaseTimeout bounds it).
		nr.Undo = m.c.holds.UndoNow(ctx, nil, ho.Release)
		r = nil
	}
	if !m.c.co.Settle(ho, r, herr) {
		m.c.holds.GiveBackHandoff(ho)
	}
	if err != nil && holds.NotReplicated(err) == nil {
		return 0, rep.Sent, err
	}
	if v, err := rep.Int64Slice(); err == nil && len(v) == 4 && v[3] == 1 {
		return holds.GoneAt, rep.Sent, nil
	}
	return 2, rep.Sent, nil
}

// handInMemory hands h's lock to ho's waiter without a round trip (see
// internal/cohort), and reports whether it did: within the run's bound, when the
// hold ended by its own last release (not forced) and the waiter's lease
// is the same watchdog lease, with neither a fencing token nor a replica
// acknowledgement to get from Redis, and the primary has not switched
// since h's lease was last set (transport.SwitchedSince). The waiter
// takes over h's Redis field, with the lease's real deadline (the stamp
// of the script that set it last) and the ForceUnlock epoch as it is now, so a ForceUnlock in
// this process from now on refuses the waiter's grant (given back, which
// frees the lock), as it refuses a grant whose script is in flight.
func (m *Mutex) handInMemory(h *lease.Hold, ho *cohort.Handoff) bool {
	if m.c.scriptHandoff || ho.Bounded || ho.Acc.Fence != "" || m.c.ack.On() || !h.Renewed || !ho.Acc.Renewed || ho.Acc.Lease != h.Lease {
		return false
	}
	why, sent := h.Ended()
	if why != lease.EndUnlocked || m.c.tr.SwitchedSince(m.name, sent) {
		// Not unlocked, or its lease was set on a primary that switched
		// since: taken there in its last moment, Redis may not have it
		// (the handoff's script checks it on the new one).
		return false
	}
	ho.Field = h.Field
	ho.Release = ho.Acc.Release(h.Field)
	ho.St = lease.Stamp{Sent: sent, Epoch: m.c.wd.Epoch(m.spec.Ref, nil), Handoff: true}
	if !m.c.co.Settle(ho, []int64{1, 1, 0}, nil) {
		m.c.holds.GiveBackHandoff(ho) // the waiter left: the lock is freed
	}
	return true
}

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	ok, err := hashLocked(ctx, m.c, m.name)
	return ok, m.wrap(err)
}

// HoldCount returns how many holds of the lock the hold ctx carries has (0
// when ctx carries none), as Redis has it.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	n, err := hashHolds(ctx, m.c, m.spec.Ref)
	return n, m.wrap(err)
}

// TTL returns the lock's remaining lease: 0 when it is free, and a negative
// duration when its key has no expiry (it was not written by a lock).
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	d, err := hashLease(ctx, m.c, m.name)
	return d, m.wrap(err)
}

// The state of a lock kept as Redisson keeps an RLock (a hash of owner
// field -> hold count at key, with a PEXPIRE lease), read for Mutex and
// FairMutex.

// hashLocked reports whether any owner holds the lock at key.
func hashLocked(ctx context.Context, c *Client, key string) (bool, error) {
	n, err := c.rdb.HLen(ctx, key).Result()
	return n > 0, err
}

// hashHolds returns the holds that the hold of ref ctx carries has in Redis.
func hashHolds(ctx context.Context, c *Client, ref lease.Ref) (int, error) {
	h := holds.Held(ctx, ref)
	if h == nil {
		return 0, nil
	}
	n, err := c.rdb.HGet(ctx, ref.Name, h.Field).Int()
	if isNil(err) {
		return 0, nil
	}
	return n, err
}

// hashLease returns the lock's remaining lease: 0 when free, negative when
// its key has no expiry.
func hashLease(ctx context.Context, c *Client, key string) (time.Duration, error) {
	d, err := c.rdb.PTTL(ctx, key).Result()
	if d == -2 { // go-redis passes PTTL's -2 (no key) through as is
		return 0, err
	}
	return d, err
}

// ForceUnlock frees the lock whoever holds it and wakes a waiter, reporting
// whether it was held. Holders lose their lease: their contexts are cancelled
// with ErrLeaseLost, in this process before the lock is freed, in others at
// their next renewal. A key of another type is refused and kept.
// When ctx ends before the script has answered, ForceUnlock returns ctx's
// error and the script may still run: until it has answered, this
// Client's new acquisitions of the lock wait for it (TryLock reports
// ErrNotAcquired), so none is freed by it.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	n, err := m.c.holds.ForceBy(ctx, script(lua.ForceUnlock, []string{m.name}, publish, unlockMessage, m.channel), m.spec.Ref).Int64()
	if err != nil {
		return false, m.wrap(err)
	}
	return n == 1, nil
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// redissonName names a key or channel of name the way Redisson does:
// prefix + ":{" + name + "}", or prefix + ":" + name when the name already
// contains "{" (a hash-tagged name keeps its own tag).
func redissonName(prefix, name string) string {
	if strings.Contains(name, "{") {
		return prefix + ":" + name
	}
	return prefix + ":{" + name + "}"
}
