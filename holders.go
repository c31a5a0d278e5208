package redisync

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redisync-go/redisync/lua"
)

// Holder is one hold of a lock as Redis has it, for a user debugging a
// lock that stays held: which Client holds it (ClientID, what Client.ID
// returns in that process; log it at start to find the process), which of
// its holds (Owner), how many times, and for how much longer unless it is
// renewed.
type Holder struct {
	// ClientID is the ID of the holder's Client (Client.ID).
	ClientID string
	// Owner is the hold's owner field in Redis, "<ClientID>:<n>": one per
	// hold (per WithOwner scope, per goroutine that locked on its own).
	Owner string
	// Count is the hold's re-entries (Mutex, FairMutex, RWMutex), or the
	// permits it holds (Semaphore).
	Count int
	// Write is set for the write hold of an RWMutex; its read holds, and
	// every other primitive's holds, have it unset.
	Write bool
	// Lease is what is left of the hold's lease in Redis: its holder's
	// watchdog renews it every third of the lease, so a lease that is
	// not renewed (a holder that crashed, or was stopped) runs out within
	// it. Negative when its key has no expiry (not written by a lock).
	Lease time.Duration
}

// holderOf returns the Holder of owner field f.
func holderOf(f string, count int64, lease int64) Holder {
	id := f
	if i := strings.LastIndexByte(f, ':'); i >= 0 {
		id = f[:i]
	}
	return Holder{ClientID: id, Owner: f, Count: int(count), Lease: time.Duration(lease) * time.Millisecond}
}

// sortHolders orders hs by owner, write holds first.
func sortHolders(hs []Holder) []Holder {
	slices.SortFunc(hs, func(a, b Holder) int {
		if a.Write != b.Write {
			if a.Write {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Owner, b.Owner)
	})
	return hs
}

// hashHolders lists the holders of the reentrant lock at key (Mutex,
// FairMutex).
func hashHolders(ctx context.Context, c *Client, key string) ([]Holder, error) {
	v, err := c.tr.Do(ctx, script(lua.Holders, []string{key}), nil).Slice()
	if err != nil {
		return nil, err
	}
	return parseHashHolders(v)
}

// parseHashHolders reads lua.Holders's reply.
func parseHashHolders(v []any) ([]Holder, error) {
	if len(v)%2 != 1 {
		return nil, fmt.Errorf("redisync: unexpected reply %v", v)
	}
	pttl, _ := v[0].(int64)
	hs := []Holder{}
	for i := 1; i+1 < len(v); i += 2 {
		f, _ := v[i].(string)
		n, err := strconv.ParseInt(fmt.Sprint(v[i+1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisync: owner %q has a count %q that is not a number", f, v[i+1])
		}
		hs = append(hs, holderOf(f, n, pttl))
	}
	return sortHolders(hs), nil
}

// Holders lists who holds the lock, as Redis has it: at most one Holder
// (a Mutex has one owner), with its Client's ID, its re-entries and the
// lease left; none when the lock is free. A key of another type (another
// kind of lock) is refused.
func (m *Mutex) Holders(ctx context.Context) ([]Holder, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	hs, err := hashHolders(ctx, m.c, m.name)
	return hs, m.wrap(err)
}

// Holders lists who holds the lock, as Mutex.Holders does. Waiters in the
// queue are not holders.
func (f *FairMutex) Holders(ctx context.Context) ([]Holder, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	hs, err := hashHolders(ctx, f.c, f.name)
	return hs, f.wrap(err)
}

// Holders lists the holds of the lock, as Redis has them: the write hold
// (Write set) or the read holds, each with its Client's ID, its
// re-entries and the lease left (each read hold has a lease of its own);
// a writer that took the read lock too (a downgrade) is listed twice,
// once each way. Read holds whose lease has run out are left out.
func (r *RWMutex) Holders(ctx context.Context) ([]Holder, error) {
	if err := r.check(ctx); err != nil {
		return nil, err
	}
	v, err := r.c.tr.Do(ctx, call{Script: lua.RWHolders, Keys: r.keys[:2]}, nil).Slice()
	if err != nil {
		return nil, r.wrap(err)
	}
	hs := []Holder{}
	for i := 0; i+3 < len(v); i += 4 {
		w, _ := v[i].(int64)
		f, _ := v[i+1].(string)
		n, _ := v[i+2].(int64)
		lease, _ := v[i+3].(int64)
		h := holderOf(f, n, lease)
		h.Write = w == 1
		hs = append(hs, h)
	}
	return sortHolders(hs), nil
}

// Holders lists who holds each of the MultiLock's names, as Redis has it:
// every name maps to its holders as Mutex.Holders lists them (none when
// that name is free), read in one batch, each name's in one read. A hold
// of the MultiLock is listed under each name, with the same owner; a
// Mutex (or a Redisson RLock) that holds one of the names is listed under
// it. A name whose key holds another type (another kind of lock) is
// refused, naming it (ErrWrongType).
func (m *MultiLock) Holders(ctx context.Context) (map[string][]Holder, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	hs, err := m.holders(ctx)
	return hs, m.wrap(err)
}

// holders reads the holders of every name.
func (m *MultiLock) holders(ctx context.Context) (map[string][]Holder, error) {
	calls := make([]call, len(m.names))
	for i, n := range m.names {
		calls[i] = script(lua.Holders, []string{n})
	}
	out := make(map[string][]Holder, len(m.names))
	for i, r := range m.c.tr.DoAll(ctx, calls) {
		v, err := r.Slice()
		if err != nil {
			return nil, err
		}
		hs, err := parseHashHolders(v)
		if err != nil {
			return nil, err
		}
		out[m.names[i]] = hs
	}
	return out, nil
}

// Holders lists the owners of the semaphore's permits, as Redis has them:
// each with its Client's ID, the permits it holds (Count) and the lease
// left. Holders whose lease has run out (not reclaimed yet) are left out.
func (s *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	v, err := s.c.tr.Do(ctx, script(lua.SemHolders, s.keys[:3]), nil).Slice()
	if err != nil {
		return nil, s.wrap(err)
	}
	hs := []Holder{}
	for i := 0; i+2 < len(v); i += 3 {
		f, _ := v[i].(string)
		n, _ := v[i+1].(int64)
		lease, _ := v[i+2].(int64)
		hs = append(hs, holderOf(f, n, lease))
	}
	return sortHolders(hs), nil
}
