package redisync

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/lua"
)

// What a MultiLock's names say in Redis: whether it is locked, the lease
// left, the holds of a context, and ForceUnlock. Each name is an ordinary
// Mutex, read and freed as a Mutex's is; on a Cluster the names are read
// in one pipeline, per node.

// IsLocked reports whether any of the MultiLock's names is held, by any
// owner (the MultiLock itself, or a Mutex of that name): whether a Lock
// would have to wait now.
func (m *MultiLock) IsLocked(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	cmds := make([]*redis.IntCmd, len(m.names))
	_, err := m.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range m.names {
			cmds[i] = p.HLen(ctx, name)
		}
		return nil
	})
	if err != nil {
		return false, m.wrap(err)
	}
	for _, cmd := range cmds {
		if cmd.Val() > 0 {
			return true, nil
		}
	}
	return false, nil
}

// TTL returns the longest lease left among the MultiLock's names: how long
// until every name is free at the latest, unless renewed (a hold of the
// MultiLock has one lease for all of them). It is 0 when every name is
// free, and negative when a name's key has no expiry (it was not written
// by a lock).
func (m *MultiLock) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	cmds := make([]*redis.DurationCmd, len(m.names))
	_, err := m.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range m.names {
			cmds[i] = p.PTTL(ctx, name)
		}
		return nil
	})
	if err != nil {
		return 0, m.wrap(err)
	}
	var longest time.Duration
	for _, cmd := range cmds {
		switch d := cmd.Val(); {
		case d == -1: // go-redis passes PTTL's -1 (no expiry) through as is
			return -1, nil
		case d > longest:
			longest = d
		}
	}
	return longest, nil
}

// HoldCount returns how many holds of the MultiLock the hold ctx carries
// has, as Redis has it (0 when ctx carries none): the least count among
// its names, so 0 when Redis lost the hold from any of them.
func (m *MultiLock) HoldCount(ctx context.Context) (int, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	h := holds.Held(ctx, m.spec.Ref)
	if h == nil {
		return 0, nil
	}
	cmds := make([]*redis.StringCmd, len(m.names))
	_, err := m.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range m.names {
			cmds[i] = p.HGet(ctx, name, h.Field)
		}
		return nil
	})
	if err != nil && !isNil(err) {
		return 0, m.wrap(err)
	}
	least := -1
	for _, cmd := range cmds {
		n, err := cmd.Int()
		switch {
		case isNil(err):
			return 0, nil
		case err != nil:
			return 0, m.wrap(err)
		case least < 0 || n < least:
			least = n
		}
	}
	return max(least, 0), nil
}

// ForceUnlock frees every name of the MultiLock whoever holds it, as
// Mutex.ForceUnlock frees one, waking a waiter of each, and reports
// whether any was held. Holders lose their lease: their contexts are
// cancelled with ErrLeaseLost, in this process before the names are freed
// (a MultiLock's hold over any of them, and a Mutex's of any of them),
// in others at their next renewal. A name whose key holds another type is
// refused and kept (the error says so), the others are freed. When ctx
// ends before every script has answered, ForceUnlock returns ctx's error
// and the scripts may still run: until they have answered, this Client's
// new acquisitions of the names wait for them.
func (m *MultiLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	calls := make([]call, len(m.names))
	for i, name := range m.names {
		calls[i] = script(lua.ForceUnlock, []string{name}, publish, unlockMessage, multiChannel(name))
	}
	freed := false
	var first error
	for _, r := range m.c.forceAllBy(ctx, calls, m.spec.Covers...) {
		n, err := r.Int64()
		if err != nil && first == nil {
			first = err
		}
		freed = freed || n == 1
	}
	return freed, m.wrap(first)
}

// forceAllBy is forceBy for several scripts, the ForceUnlocks of refs'
// locks: sent at once, and the window in which their grants are not
// trusted ends when every one has answered, late or not.
func (c *Client) forceAllBy(ctx context.Context, calls []call, refs ...lease.Ref) []reply {
	dones := make([]func(), len(refs))
	for i, ref := range refs {
		dones[i] = c.wd.Force(ref)
	}
	var left atomic.Int32
	left.Store(int32(len(calls)))
	answered := func() {
		if left.Add(-1) == 0 {
			for i := len(dones) - 1; i >= 0; i-- {
				dones[i]()
			}
		}
	}
	rs := make([]reply, len(calls))
	var wg sync.WaitGroup
	for i, k := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i] = c.tr.Do(ctx, k, func(reply) { answered() })
			if !rs[i].Gone {
				answered()
			}
		}()
	}
	wg.Wait()
	return rs
}
