package redisync

import (
	"context"
	"slices"
	"time"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/lua"
)

// The primitives as the abandonment sweep (sweep_abandon_test.go) drives
// them: one adapter each, with the ways of holding it that its rows use.
// Unlike apiKinds (api_test.go), mine takes lock options, since the
// sweep's lease-lost mode holds with a fixed lease, and Election and
// CountDownLatch are here too.

// swOps is one way of holding a primitive through one Client's handle.
type swOps struct {
	lock   func(ctx context.Context) (context.Context, error)
	try    func(ctx context.Context) (context.Context, error) // never waits long
	tryFor func(ctx context.Context, wait time.Duration) (context.Context, error)
	unlock func(ctx context.Context) error
	// count is how many holds the hold ctx carries has, as Redis has them.
	count func(ctx context.Context) (int, error)
}

// swPrim is a primitive of the sweep.
type swPrim struct {
	name string
	// prepare makes the primitive usable before anyone holds it (a
	// Semaphore's total); what it writes stays by design.
	prepare func(ctx context.Context, c *Client, name string) error
	// mine is how the rows hold it; rival a way of holding it that
	// excludes every hold of mine (the second Client takes it this way).
	// Both nil for a primitive without holds (CountDownLatch).
	mine  func(c *Client, name string, opts []anyOpt) swOps
	rival func(c *Client, name string) swOps
	force func(ctx context.Context, c *Client, name string) (bool, error)
	// The scripts of mine's first acquisition and re-entry, of its
	// release, of the give-back of a hold that ended with its context,
	// and of ForceUnlock.
	lockScript, unlockScript, dropScript, forceScript *lua.Script
	// reenters: a Lock through a hold's context re-enters it.
	reenters bool
	// shared: holds of mine of different owners may overlap (readers,
	// permits); none of them overlaps the rival's.
	shared bool
	// lagging: its scripts set a hold's count in Redis, and an abandoned
	// call's is not taken back: it is set right by the next call through
	// the hold, and the last release deletes the hold whatever its count
	// (MultiLock, see holds.Machine.UnderHold). Until then Redis's count may lag.
	lagging bool
	// residue lists the keys that stay by design once nothing is held.
	residue func(name string) []string
}

// swFairOpts keeps a waiter that could not leave the queue (its link
// silent) for swWaiters, not DefaultWaiterTimeout.
func swFairOpts[O option](opts []anyOpt) []O {
	return as[O](slices.Concat(opts, []anyOpt{WithWaiterTimeout(swWaiters)}))
}

func swMutexOps(c *Client, name string, opts []anyOpt) swOps {
	m := c.Mutex(name, as[MutexOption](opts)...)
	return swOps{lock: m.Lock, try: m.TryLock, tryFor: m.TryLockFor, unlock: m.Unlock, count: m.HoldCount}
}

func swFairOps(c *Client, name string, opts []anyOpt) swOps {
	f := c.FairMutex(name, swFairOpts[FairOption](opts)...)
	return swOps{lock: f.Lock, try: f.TryLock, tryFor: f.TryLockFor, unlock: f.Unlock, count: f.HoldCount}
}

func swWriteOps(c *Client, name string, opts []anyOpt) swOps {
	r := c.RWMutex(name, swFairOpts[RWOption](opts)...)
	return swOps{lock: r.Lock, try: r.TryLock, tryFor: r.TryLockFor, unlock: r.Unlock, count: r.HoldCount}
}

func swReadOps(c *Client, name string, opts []anyOpt) swOps {
	r := c.RWMutex(name, swFairOpts[RWOption](opts)...)
	return swOps{lock: r.RLock, try: r.TryRLock, tryFor: r.TryRLockFor, unlock: r.RUnlock, count: r.RHoldCount}
}

// swSemTotal is the sweep's Semaphores' total: mine takes one permit, the
// rival both.
const swSemTotal = 2

func swSemOps(n int) func(c *Client, name string, opts []anyOpt) swOps {
	return func(c *Client, name string, opts []anyOpt) swOps {
		s := c.Semaphore(name, as[SemaphoreOption](opts)...)
		return swOps{
			lock:   func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, n) },
			try:    func(ctx context.Context) (context.Context, error) { return s.TryAcquire(ctx, n) },
			tryFor: func(ctx context.Context, d time.Duration) (context.Context, error) { return s.TryAcquireFor(ctx, n, d) },
			unlock: func(ctx context.Context) error { return s.Release(ctx, n) },
			count: func(ctx context.Context) (int, error) {
				h := holds.Held(ctx, s.spec.Ref)
				if h == nil {
					return 0, nil
				}
				v, err := c.rdb.HGet(context.Background(), s.keys[1], h.Field).Int()
				if isNil(err) {
					return 0, nil
				}
				return v, err
			},
		}
	}
}

func swMultiOps(c *Client, name string, opts []anyOpt) swOps {
	m := c.MultiLock(multiNames(name), as[MultiLockOption](opts)...)
	return swOps{
		lock: m.Lock, try: m.TryLock, tryFor: m.TryLockFor, unlock: m.Unlock,
		count: func(ctx context.Context) (int, error) {
			h := holds.Held(ctx, m.spec.Ref)
			if h == nil {
				return 0, nil
			}
			least := -1 // the least count among the names
			for _, key := range m.names {
				v, err := c.rdb.HGet(context.Background(), key, h.Field).Int()
				if isNil(err) {
					v, err = 0, nil
				}
				if err != nil {
					return 0, err
				}
				if least < 0 || v < least {
					least = v
				}
			}
			return least, nil
		},
	}
}

// swElectTry bounds the wait of an Election's "try", which it has not.
const swElectTry = 50 * time.Millisecond

func swElectOps(c *Client, name string, opts []anyOpt) swOps {
	e := c.Election(name, as[ElectionOption](opts)...)
	campaign := func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, c.ID()) }
	return swOps{
		lock: campaign,
		try: func(ctx context.Context) (context.Context, error) {
			// The leadership is bound to wctx: a timer that fires after
			// Campaign returned ends it, which a check of the sweep
			// then sees as a leadership that ended.
			wctx, cancel := context.WithCancel(ctx)
			stop := time.AfterFunc(swElectTry, cancel)
			hctx, err := campaign(wctx)
			if err != nil || !stop.Stop() {
				cancel()
			}
			return hctx, err
		},
		unlock: e.Resign,
	}
}

var (
	swMutex = &swPrim{name: "Mutex", mine: swMutexOps,
		rival:      func(c *Client, name string) swOps { return swMutexOps(c, name, nil) },
		force:      func(ctx context.Context, c *Client, name string) (bool, error) { return c.Mutex(name).ForceUnlock(ctx) },
		lockScript: lua.Lock, unlockScript: lua.Unlock, dropScript: lua.Drop, forceScript: lua.ForceUnlock, reenters: true}
	swFair = &swPrim{name: "FairMutex", mine: swFairOps,
		rival: func(c *Client, name string) swOps { return swFairOps(c, name, nil) },
		force: func(ctx context.Context, c *Client, name string) (bool, error) {
			return c.FairMutex(name).ForceUnlock(ctx)
		},
		lockScript: lua.FairLock, unlockScript: lua.FairUnlock, dropScript: lua.FairDrop, forceScript: lua.FairForceUnlock, reenters: true}
	swWrite = &swPrim{name: "RWMutex", mine: swWriteOps,
		rival: func(c *Client, name string) swOps { return swWriteOps(c, name, nil) },
		force: func(ctx context.Context, c *Client, name string) (bool, error) {
			return c.RWMutex(name).ForceUnlock(ctx)
		},
		lockScript: lua.RWLock, unlockScript: lua.RWUnlock, dropScript: lua.RWUnlock, forceScript: lua.RWForce, reenters: true}
	swRead = &swPrim{name: "RWMutex", mine: swReadOps,
		rival:      func(c *Client, name string) swOps { return swWriteOps(c, name, nil) },
		lockScript: lua.RWRLock, unlockScript: lua.RWRUnlock, dropScript: lua.RWRUnlock, reenters: true, shared: true}
	swSem = &swPrim{name: "Semaphore", mine: swSemOps(1),
		prepare: func(ctx context.Context, c *Client, name string) error {
			return c.Semaphore(name).SetPermits(ctx, swSemTotal)
		},
		rival:      func(c *Client, name string) swOps { return swSemOps(swSemTotal)(c, name, nil) },
		lockScript: lua.SemAcquire, unlockScript: lua.SemRelease, dropScript: lua.SemDrop, reenters: true, shared: true}
	swMulti = &swPrim{name: "MultiLock", mine: swMultiOps,
		rival:      func(c *Client, name string) swOps { return swMutexOps(c, name, nil) },
		lockScript: lua.MultiLock, unlockScript: lua.MultiUnlock, dropScript: lua.MultiUnlock, reenters: true, lagging: true}
	swElect = &swPrim{name: "Election", mine: swElectOps,
		rival:      func(c *Client, name string) swOps { return swElectOps(c, name, nil) },
		lockScript: lua.ElectCampaign, unlockScript: lua.ElectResign, dropScript: lua.ElectResign,
		residue: func(name string) []string { return []string{keys.Companion(name, "elect-term")} }}
	swLatch = &swPrim{name: "CountDownLatch", mine: func(c *Client, name string, _ []anyOpt) swOps {
		// A latch has no holds: its "lock" is Wait.
		l := c.CountDownLatch(name)
		return swOps{lock: func(ctx context.Context) (context.Context, error) { return nil, l.Wait(ctx) }}
	}}
)

// swScripts are every script the sweep's calls send, loaded into each
// Redis beforehand: a script whose EVALSHA is answered NOSCRIPT is sent
// again as EVAL, and a fault meant for the call's script would hit the
// first send only.
var swScripts = []*lua.Script{
	lua.Lock, lua.Unlock, lua.Renew, lua.ForceUnlock, lua.Drop, lua.Handoff,
	lua.FairLock, lua.FairUnlock, lua.FairLeave, lua.FairDrop, lua.FairForceUnlock,
	lua.RWRLock, lua.RWRUnlock, lua.RWLock, lua.RWUnlock, lua.RWRenewRead, lua.RWRenewWrite,
	lua.RWLeave, lua.RWForce, lua.RWInfo,
	lua.SemAcquire, lua.SemRelease, lua.SemRenew, lua.SemDrop, lua.SemSet, lua.SemAvailable,
	lua.MultiLock, lua.MultiUnlock, lua.MultiRenew,
	lua.ElectCampaign, lua.ElectRenew, lua.ElectResign, lua.ElectLeader,
	lua.LatchCountDown, lua.LatchDelete,
}
