package redisync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// unlockMessage is what Redisson publishes when an RLock is freed.
const unlockMessage = "0"

// Mutex is a reentrant distributed lock. It is stored the way Redisson's RLock
// stores it (a hash at the key name, field "<client uuid>:<n>" → hold count,
// unlock message "0" on "redisson_lock__channel:{name}"), so Go services and
// Java services using Redisson can guard the same resource.
//
// A Mutex is a cheap handle, safe for concurrent use: the owner is the
// context's, never the handle's (see Lock).
type Mutex struct {
	c       *Client
	name    string
	channel string
	lease   time.Duration // what the scripts set
	renewed bool          // kept alive by the watchdog (no WithLease)
	err     error         // bad name or option, returned by every method
}

// Mutex returns a handle on the reentrant lock name. Bad input (an empty
// name, a bad option) is reported by every method of the handle.
func (c *Client) Mutex(name string, opts ...LockOption) *Mutex {
	m := &Mutex{name: name, channel: "redisson_lock__channel:{" + name + "}"}
	if c == nil {
		m.err = fmt.Errorf("%w: nil Client", ErrInvalid)
		return m
	}
	lc, err := lockSetup(name, opts, false)
	m.c, m.err, m.lease, m.renewed = c, err, c.lease, true
	if lc.lease > 0 {
		m.lease, m.renewed = lc.lease, false
	}
	return m
}

// Name returns the lock's name, which is also its Redis key.
func (m *Mutex) Name() string { return m.name }

func (m *Mutex) check() error {
	if m.err != nil {
		return m.err
	}
	return m.c.checkOpen()
}

func (m *Mutex) wrap(err error) error {
	return fmt.Errorf("redisync: lock %q: %w", m.name, err)
}

func (m *Mutex) holdID(field string) string { return "mutex\x00" + m.name + "\x00" + field }

// Lock acquires the lock for ctx's owner, waiting until it is free or ctx
// ends (then it returns ctx's error). A context without an owner gets a new
// one, so goroutines sharing the handle exclude each other.
//
// It returns the hold's context: pass it down, and a nested Lock with it
// re-enters (and returns it as given); pass it to Unlock. It is cancelled
// with cause ErrLeaseLost if the lease is lost, and plainly when the owner's
// last hold is released. On error, Lock returns ctx unchanged.
func (m *Mutex) Lock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, true)
}

// TryLock is Lock without waiting: it returns an error wrapping
// ErrNotAcquired when another owner holds the lock.
func (m *Mutex) TryLock(ctx context.Context) (context.Context, error) {
	return m.lock(ctx, false)
}

func (m *Mutex) lock(parent context.Context, wait bool) (context.Context, error) {
	if err := m.check(); err != nil {
		return parent, err
	}
	if err := parent.Err(); err != nil {
		return parent, err
	}
	ctx, o := ensureOwner(parent)
	var mk mark
	var queued bool
	if wait && m.c.wd.get(m.holdID(m.c.field(o))) == nil {
		mk, queued = m.c.ps.mark(m.channel)
	}
	var hctx context.Context
	ttl := m.lease / 3
	if !queued {
		var err error
		if hctx, ttl, err = m.try(ctx, o); err != nil {
			return parent, err
		}
		if hctx != nil {
			return hctx, nil
		}
		if !wait {
			return parent, m.wrap(ErrNotAcquired)
		}
	}
	// Local waiters queued before this call are woken first (one per
	// unlock message), so a new call that finds them queues behind them
	// rather than trying: fair among the goroutines of one process, and
	// one failing round trip fewer per acquisition under contention.
	var err error
	err = m.c.awaitFrom(ctx, mk, m.channel, wakeOne, ttl, func() (bool, time.Duration, error) {
		hctx, ttl, err = m.try(ctx, o)
		return hctx != nil, ttl, err
	}, false)
	if err != nil {
		return parent, err
	}
	m.c.ps.rotate(m.channel)
	return hctx, nil
}

// try runs the lock script once. It returns the hold's context when o holds
// the lock, or the bound to wait before trying again.
func (m *Mutex) try(ctx context.Context, o *owner) (context.Context, time.Duration, error) {
	field := m.c.field(o)
	id := m.holdID(field)
	keys := []string{m.name}
	leaseMs := m.lease.Milliseconds()

	o.mu.Lock()
	defer o.mu.Unlock()
	h := m.c.wd.get(id)
	count := 0
	if h != nil {
		count = h.count
	}
	// The script runs to completion even if ctx ends meanwhile: a lock taken
	// in Redis but abandoned here would stay taken for a whole lease.
	sent := time.Now()
	r, err := lua.Lock.Run(context.WithoutCancel(ctx), m.c.rdb, keys, leaseMs, field, count).Int64Slice()
	if err != nil {
		return nil, 0, m.wrap(err)
	}
	if r[0] == 0 {
		return nil, bound(r[1], m.lease/3), nil
	}
	if h != nil {
		h.count = int(r[1])
		m.c.wd.extend(h, sent)
		return ctx, 0, nil
	}
	hctx, cancel := context.WithCancelCause(ctx)
	h = &hold{
		id:      id,
		lease:   m.lease,
		renewed: m.renewed,
		renew:   call{lua.Renew, keys, []any{field, leaseMs}},
		release: call{lua.Drop, keys, []any{field, m.channel, unlockMessage}},
		count:   int(r[1]),
		ctx:     hctx,
		cancel:  cancel,
	}
	if !m.c.wd.add(h, sent) {
		cancel(ErrClosed)
		rctx, done := detach(ctx)
		defer done()
		_ = lua.Drop.Run(rctx, m.c.rdb, keys, field, m.channel, unlockMessage).Err()
		return nil, 0, ErrClosed
	}
	return hctx, 0, nil
}

// Unlock releases one hold of ctx's owner; the lock is freed, and one waiter
// woken, when the owner's last hold is released. It returns an error wrapping
// ErrNotHeld, changing nothing, when the owner does not hold the lock
// (including after its lease was lost). It works with a cancelled ctx.
//
// After an error other than ErrNotHeld on the last hold (Redis unreachable),
// the hold is no longer renewed: Redis frees the lock when its lease ends.
func (m *Mutex) Unlock(ctx context.Context) error {
	if err := m.check(); err != nil {
		return err
	}
	o := ownerOf(ctx)
	if o == nil {
		return m.wrap(fmt.Errorf("%w (the context carries no owner)", ErrNotHeld))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	field := m.c.field(o)
	keys := []string{m.name}

	o.mu.Lock()
	defer o.mu.Unlock()
	h := m.c.wd.get(m.holdID(field))
	if h == nil {
		// Not held as far as this process knows; clear what a lost or
		// abandoned hold of this owner may have left in Redis.
		n, err := lua.Drop.Run(ctx, m.c.rdb, keys, field, m.channel, unlockMessage).Int64()
		if err != nil {
			return m.wrap(err)
		}
		if n == 1 {
			return nil
		}
		return m.wrap(ErrNotHeld)
	}
	err := m.c.wd.unhold(h, func(count int) (int64, error) {
		return lua.Unlock.Run(ctx, m.c.rdb, keys, field, count, m.lease.Milliseconds(), m.channel, unlockMessage).Int64()
	})
	if err != nil {
		return m.wrap(err)
	}
	return nil
}

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	if err := m.check(); err != nil {
		return false, err
	}
	ok, err := hashLocked(ctx, m.c, m.name)
	if err != nil {
		return false, m.wrap(err)
	}
	return ok, nil
}

// HoldCount returns how many holds ctx's owner has on the lock (0 when none).
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	n, err := hashHolds(ctx, m.c, m.name)
	if err != nil {
		return 0, m.wrap(err)
	}
	return n, nil
}

// TTL returns the lock's remaining lease: 0 when it is free, and a negative
// duration when its key has no expiry (it was not written by a lock).
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.check(); err != nil {
		return 0, err
	}
	d, err := hashLease(ctx, m.c, m.name)
	if err != nil {
		return 0, m.wrap(err)
	}
	return d, nil
}

// The state of a lock kept as Redisson keeps an RLock (a hash of owner
// field -> hold count at key, with a PEXPIRE lease), read for Mutex and
// FairMutex.

// hashLocked reports whether any owner holds the lock at key.
func hashLocked(ctx context.Context, c *Client, key string) (bool, error) {
	n, err := c.rdb.HLen(ctx, key).Result()
	return n > 0, err
}

// hashHolds returns the holds ctx's owner has on the lock at key.
func hashHolds(ctx context.Context, c *Client, key string) (int, error) {
	o := ownerOf(ctx)
	if o == nil {
		return 0, nil
	}
	n, err := c.rdb.HGet(ctx, key, c.field(o)).Int()
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
// with ErrLeaseLost (at once in this process, at their next renewal in
// others). A key of another type is refused and kept.
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(); err != nil {
		return false, err
	}
	n, err := lua.ForceUnlock.Run(ctx, m.c.rdb, []string{m.name}, m.channel, unlockMessage).Int64()
	if err != nil {
		return false, m.wrap(err)
	}
	m.c.wd.loseAll("mutex\x00" + m.name + "\x00")
	return n == 1, nil
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
