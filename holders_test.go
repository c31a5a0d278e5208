package redisync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownerOf returns the Redis owner field of the hold of ref ctx carries.
func ownerOf(t *testing.T, ctx context.Context, ref lease.Ref) string {
	t.Helper()
	h := holds.Carried(ctx, ref)
	require.NotNil(t, h)
	return h.Field
}

// checkHolders asserts that hs are want (in any order), each with a lease
// left in (0, max].
func checkHolders(t *testing.T, what string, hs []Holder, max time.Duration, want ...Holder) {
	t.Helper()
	got := make([]Holder, len(hs))
	for i, h := range hs {
		assert.Positive(t, h.Lease, "%s: %+v", what, h)
		assert.LessOrEqual(t, h.Lease, max, "%s: %+v", what, h)
		assert.True(t, strings.HasPrefix(h.Owner, h.ClientID+":"), "%s: the owner field begins with the client's ID: %+v", what, h)
		h.Lease = 0
		got[i] = h
	}
	assert.ElementsMatch(t, want, got, what)
}

// holdersChecks runs the Holders checks with Clients made by client, on
// the lock names names makes.
func holdersChecks(t *testing.T, client func() *Client, lease time.Duration, names func(string) string) {
	bg := context.Background()
	c1, c2 := client(), client()

	// Mutex: free, then one owner with a re-entry.
	m := c1.Mutex(names("h:m"))
	hs, err := m.Holders(bg)
	require.NoError(t, err)
	assert.Empty(t, hs, "a free lock has no holder")
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	_, err = m.Lock(lctx)
	require.NoError(t, err)
	hs, err = c2.Mutex(names("h:m")).Holders(bg)
	require.NoError(t, err)
	checkHolders(t, "Mutex", hs, lease, Holder{ClientID: c1.ID(), Owner: ownerOf(t, lctx, m.spec.Ref), Count: 2})

	// FairMutex: a queued waiter is not a holder.
	f := c1.FairMutex(names("h:f"))
	fctx, err := f.Lock(bg)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(bg)
	defer cancel()
	go func() { _, _ = c2.FairMutex(names("h:f")).Lock(wctx) }()
	time.Sleep(50 * time.Millisecond)
	hs, err = c2.FairMutex(names("h:f")).Holders(bg)
	require.NoError(t, err)
	checkHolders(t, "FairMutex", hs, lease, Holder{ClientID: c1.ID(), Owner: ownerOf(t, fctx, f.spec.Ref), Count: 1})
	cancel()

	// RWMutex: readers of two Clients, then a writer that downgrades.
	r1, r2 := c1.RWMutex(names("h:rw")), c2.RWMutex(names("h:rw"))
	rctx1, err := r1.RLock(bg)
	require.NoError(t, err)
	rctx2, err := r2.RLock(bg)
	require.NoError(t, err)
	_, err = r2.RLock(rctx2)
	require.NoError(t, err)
	hs, err = r1.Holders(bg)
	require.NoError(t, err)
	checkHolders(t, "RWMutex readers", hs, lease,
		Holder{ClientID: c1.ID(), Owner: ownerOf(t, rctx1, r1.rspec.Ref), Count: 1},
		Holder{ClientID: c2.ID(), Owner: ownerOf(t, rctx2, r2.rspec.Ref), Count: 2})
	require.NoError(t, r1.RUnlock(rctx1))
	require.NoError(t, r2.RUnlock(rctx2))
	require.NoError(t, r2.RUnlock(rctx2))
	wctx2, err := r2.Lock(bg)
	require.NoError(t, err)
	dctx, err := r2.RLock(wctx2)
	require.NoError(t, err)
	hs, err = r1.Holders(bg)
	require.NoError(t, err)
	checkHolders(t, "RWMutex writer and its downgrade", hs, lease,
		Holder{ClientID: c2.ID(), Owner: ownerOf(t, wctx2, r2.wspec.Ref), Count: 1, Write: true},
		Holder{ClientID: c2.ID(), Owner: ownerOf(t, dctx, r2.rspec.Ref), Count: 1})

	// Semaphore: permits per owner.
	s1, s2 := c1.Semaphore(names("h:s"), WithPermits(6)), c2.Semaphore(names("h:s"), WithPermits(6))
	sctx1, err := s1.Acquire(bg, 2)
	require.NoError(t, err)
	sctx2, err := s2.Acquire(bg, 1)
	require.NoError(t, err)
	_, err = s2.Acquire(sctx2, 2)
	require.NoError(t, err)
	hs, err = s1.Holders(bg)
	require.NoError(t, err)
	checkHolders(t, "Semaphore", hs, lease,
		Holder{ClientID: c1.ID(), Owner: ownerOf(t, sctx1, s1.spec.Ref), Count: 2},
		Holder{ClientID: c2.ID(), Owner: ownerOf(t, sctx2, s2.spec.Ref), Count: 3})

	// Holders whose lease ran out in Redis (a crashed process's, not yet
	// reclaimed) are not listed.
	const short = 100 * time.Millisecond
	_, err = c2.Semaphore(names("h:s"), WithLease(short)).Acquire(bg, 1)
	require.NoError(t, err)
	_, err = c2.RWMutex(names("h:rx"), WithLease(short)).RLock(bg)
	require.NoError(t, err)
	_, err = c2.Mutex(names("h:mx"), WithLease(short)).Lock(bg)
	require.NoError(t, err)
	time.Sleep(2 * short)
	hs, err = s1.Holders(bg)
	require.NoError(t, err)
	assert.Len(t, hs, 2, "the expired holder is not listed: %+v", hs)
	for _, n := range []string{"h:rx", "h:mx"} {
		var hs []Holder
		if n == "h:rx" {
			hs, err = c1.RWMutex(names(n)).Holders(bg)
		} else {
			hs, err = c1.Mutex(names(n)).Holders(bg)
		}
		require.NoError(t, err)
		assert.Empty(t, hs, n)
	}
}

// Holders reports who holds each kind of lock, how many times (permits),
// read or write, with the lease left, on a single node.
func TestHolders(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	holdersChecks(t, func() *Client { return e.client(t) }, DefaultWatchdogTimeout, func(n string) string { return n })

	// A key of another type is refused, naming it.
	bg := context.Background()
	rdb := e.rdb(t)
	c := e.client(t)
	require.NoError(t, rdb.Set(bg, "h:str", "x", 0).Err())
	_, err := c.Mutex("h:str").Holders(bg)
	assert.ErrorContains(t, err, `"h:str"`)
	assert.ErrorContains(t, err, "WRONGTYPE")
	require.NoError(t, c.Semaphore("h:sem").SetPermits(bg, 1))
	_, err = c.Mutex("h:sem").Holders(bg)
	assert.ErrorContains(t, err, "WRONGTYPE", "a Semaphore's hash is not a Mutex")
	_, err = c.RWMutex("h:sem").Holders(bg)
	assert.ErrorContains(t, err, "WRONGTYPE")
	// A Mutex's hash is not a Semaphore's: its scripts and Holders share
	// one type check (lua/sem_type.lua).
	mctx, err := c.Mutex("h:mx").Lock(bg)
	require.NoError(t, err)
	_, err = c.Semaphore("h:mx").Holders(bg)
	assert.ErrorContains(t, err, "WRONGTYPE", "a Mutex's hash is not a Semaphore")
	_, err = c.Semaphore("h:mx").TryAcquire(bg, 1)
	assert.ErrorContains(t, err, "WRONGTYPE", "a Mutex's hash is not a Semaphore")
	require.NoError(t, c.Mutex("h:mx").Unlock(mctx))
	_, err = c.Mutex("").Holders(bg)
	assert.ErrorIs(t, err, ErrInvalid)
}

// The same on a Cluster: each lock in a slot of its own.
func TestHoldersOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	holdersChecks(t, func() *Client { return newClient(t, cl.Client(t)) }, DefaultWatchdogTimeout,
		func(n string) string { return "{" + n + "}" })
}

// multiStateChecks checks IsLocked, TTL, HoldCount and ForceUnlock of a
// MultiLock over names, whose Clients come from client.
func multiStateChecks(t *testing.T, client func(...Option) *Client, names []string) {
	bg := context.Background()
	const lease = 600 * time.Millisecond
	c1, c2 := client(), client(WithWatchdogTimeout(lease))
	m1, m2 := c1.MultiLock(names), c2.MultiLock(names)
	require.NoError(t, m1.err)

	locked, err := m1.IsLocked(bg)
	require.NoError(t, err)
	assert.False(t, locked)
	ttl, err := m1.TTL(bg)
	require.NoError(t, err)
	assert.Zero(t, ttl, "free: no lease")
	n, err := m1.HoldCount(bg)
	require.NoError(t, err)
	assert.Zero(t, n)

	// One name held by a Mutex: the MultiLock is locked, for that lease.
	mctx, err := c1.Mutex(names[len(names)-1], WithLease(5*time.Second)).Lock(bg)
	require.NoError(t, err)
	locked, err = m2.IsLocked(bg)
	require.NoError(t, err)
	assert.True(t, locked, "any name held")
	ttl, err = m2.TTL(bg)
	require.NoError(t, err)
	assert.Greater(t, ttl, 4*time.Second)
	assert.LessOrEqual(t, ttl, 5*time.Second)
	require.NoError(t, c1.Mutex(names[len(names)-1], WithLease(5*time.Second)).Unlock(mctx))

	// Held as a MultiLock, re-entered.
	lctx, err := m2.Lock(bg)
	require.NoError(t, err)
	_, err = m2.Lock(lctx)
	require.NoError(t, err)
	n, err = m2.HoldCount(lctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	n, err = m1.HoldCount(bg)
	require.NoError(t, err)
	assert.Zero(t, n, "a context without the hold")
	locked, err = m1.IsLocked(bg)
	require.NoError(t, err)
	assert.True(t, locked)
	ttl, err = m1.TTL(bg)
	require.NoError(t, err)
	assert.Positive(t, ttl)
	assert.LessOrEqual(t, ttl, lease)
	for _, name := range names {
		hs, err := c1.Mutex(name).Holders(bg)
		require.NoError(t, err)
		require.Len(t, hs, 1, name)
		assert.Equal(t, c2.ID(), hs[0].ClientID, name)
		assert.Equal(t, 2, hs[0].Count, name)
	}

	// A waiter of the MultiLock in another Client, woken by ForceUnlock.
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		wctx, err := m1.Lock(ctx)
		if err == nil {
			err = m1.Unlock(wctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)

	// ForceUnlock from the holder's Client: its hold ends first, with
	// ErrLeaseLost, then every name is free.
	forced, err := m2.ForceUnlock(bg)
	require.NoError(t, err)
	assert.True(t, forced)
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost, "ended before the names were freed")
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter got it")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	forced, err = m1.ForceUnlock(bg)
	require.NoError(t, err)
	assert.False(t, forced, "nothing held")
	locked, err = m1.IsLocked(bg)
	require.NoError(t, err)
	assert.False(t, locked)

	// ForceUnlock from another Client: the holder hears at its next
	// renewal (within its lease), and the names are free at once.
	lctx, err = m2.Lock(bg)
	require.NoError(t, err)
	forced, err = m1.ForceUnlock(bg)
	require.NoError(t, err)
	assert.True(t, forced)
	locked, err = m1.IsLocked(bg)
	require.NoError(t, err)
	assert.False(t, locked)
	select {
	case <-lctx.Done():
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
	case <-time.After(lease + time.Second):
		t.Fatal("the holder was not told")
	}
	assert.ErrorIs(t, m2.Unlock(lctx), ErrLeaseLost)
	_, err = c1.MultiLock(nil).ForceUnlock(bg)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestMultiLockState(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	multiStateChecks(t, func(opts ...Option) *Client { return e.client(t, opts...) }, []string{"ms:a", "ms:b", "ms:c"})
}

func TestMultiLockStateOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	names := clusterMultiNames(t, cc, 3)
	multiStateChecks(t, func(opts ...Option) *Client { return newClient(t, cl.Client(t), opts...) }, names)
}

// MultiLock.Holders maps each name to its holders as Mutex.Holders lists
// them: none while free; the MultiLock's hold under every name, with its
// re-entries; a Mutex holding one name under that name only. A name of
// another type is refused (ErrWrongType), and a bad handle says so.
func TestMultiLockHolders(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c, other := e.client(t), e.client(t)
		names := []string{"mh:b", "mh:a", "mh:c"}
		ml := c.MultiLock(names)

		hs, err := ml.Holders(bg)
		require.NoError(t, err)
		assert.Equal(t, map[string][]Holder{"mh:a": {}, "mh:b": {}, "mh:c": {}}, hs, "free")

		lctx, err := ml.Lock(bg)
		require.NoError(t, err)
		lctx, err = ml.Lock(lctx) // re-entered
		require.NoError(t, err)
		hs, err = ml.Holders(bg)
		require.NoError(t, err)
		require.Len(t, hs, 3)
		owner := ""
		for _, n := range names {
			require.Len(t, hs[n], 1, n)
			h := hs[n][0]
			assert.Equal(t, c.ID(), h.ClientID, n)
			assert.Equal(t, 2, h.Count, n)
			assert.False(t, h.Write)
			assert.Greater(t, h.Lease, time.Duration(0), n)
			assert.LessOrEqual(t, h.Lease, DefaultWatchdogTimeout, n)
			if owner == "" {
				owner = h.Owner
			}
			assert.Equal(t, owner, h.Owner, "one owner under every name")
		}
		require.NoError(t, ml.Unlock(lctx))
		require.NoError(t, ml.Unlock(lctx))

		mctx, err := other.Mutex("mh:c").Lock(bg)
		require.NoError(t, err)
		hs, err = ml.Holders(bg)
		require.NoError(t, err)
		assert.Empty(t, hs["mh:a"])
		assert.Empty(t, hs["mh:b"])
		require.Len(t, hs["mh:c"], 1)
		assert.Equal(t, other.ID(), hs["mh:c"][0].ClientID)
		assert.Equal(t, 1, hs["mh:c"][0].Count)
		require.NoError(t, other.Mutex("mh:c").Unlock(mctx))

		require.NoError(t, e.rdb(t).Set(bg, "mh:b", "x", 0).Err())
		_, err = ml.Holders(bg)
		assert.ErrorIs(t, err, ErrWrongType)
		assert.ErrorContains(t, err, `"mh:b"`)
		_, err = c.MultiLock(nil).Holders(bg)
		assert.ErrorIs(t, err, ErrInvalid)
		_, err = (*MultiLock)(nil).Holders(bg)
		assert.ErrorIs(t, err, ErrInvalid)
	})
}
