package redisync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// renewedCase holds a primitive with WithRenewedLease(d) on c, and tries
// it from another Client (true: it got it, and gave it back).
type renewedCase struct {
	name string
	hold func(c *Client, d time.Duration) (context.Context, error)
	try  func(c *Client) bool
	key  string // whose PTTL is the lease
}

func renewedCases(t *testing.T) []renewedCase {
	bg := context.Background()
	tryFn := func(lock func(context.Context) (context.Context, error), unlock func(context.Context) error) bool {
		ctx, err := lock(bg)
		if err != nil {
			require.ErrorIs(t, err, ErrNotAcquired)
			return false
		}
		require.NoError(t, unlock(ctx))
		return true
	}
	return []renewedCase{
		{"Mutex", func(c *Client, d time.Duration) (context.Context, error) {
			return c.Mutex("rl:m", WithRenewedLease(d)).Lock(bg)
		}, func(c *Client) bool { m := c.Mutex("rl:m"); return tryFn(m.TryLock, m.Unlock) }, "rl:m"},
		{"FairMutex", func(c *Client, d time.Duration) (context.Context, error) {
			return c.FairMutex("rl:f", WithRenewedLease(d)).Lock(bg)
		}, func(c *Client) bool { m := c.FairMutex("rl:f"); return tryFn(m.TryLock, m.Unlock) }, "rl:f"},
		{"RWMutex", func(c *Client, d time.Duration) (context.Context, error) {
			return c.RWMutex("rl:rw", WithRenewedLease(d)).Lock(bg)
		}, func(c *Client) bool { m := c.RWMutex("rl:rw"); return tryFn(m.TryRLock, m.RUnlock) }, "rl:rw"},
		{"RWMutexRead", func(c *Client, d time.Duration) (context.Context, error) {
			return c.RWMutex("rl:rr", WithRenewedLease(d)).RLock(bg)
		}, func(c *Client) bool { m := c.RWMutex("rl:rr"); return tryFn(m.TryLock, m.Unlock) }, "rl:rr"},
		{"Semaphore", func(c *Client, d time.Duration) (context.Context, error) {
			return c.Semaphore("rl:s", WithRenewedLease(d), WithPermits(1)).Acquire(bg, 1)
		}, func(c *Client) bool {
			s := c.Semaphore("rl:s", WithPermits(1))
			return tryFn(func(ctx context.Context) (context.Context, error) { return s.TryAcquire(ctx, 1) },
				func(ctx context.Context) error { return s.Release(ctx, 1) })
		}, "{rl:s}:sem-holders:rl:s"},
		{"MultiLock", func(c *Client, d time.Duration) (context.Context, error) {
			return c.MultiLock([]string{"rl:ma", "rl:mb"}, WithRenewedLease(d)).Lock(bg)
		}, func(c *Client) bool { m := c.Mutex("rl:mb"); return tryFn(m.TryLock, m.Unlock) }, "rl:mb"},
		{"Election", func(c *Client, d time.Duration) (context.Context, error) {
			return c.Election("rl:e", WithRenewedLease(d)).Campaign(bg, "a")
		}, func(c *Client) bool {
			e := c.Election("rl:e")
			ctx, err := e.TryCampaignFor(bg, "b", time.Millisecond)
			if err != nil {
				require.ErrorIs(t, err, ErrNotAcquired)
				return false
			}
			require.NoError(t, e.Resign(ctx))
			return true
		}, "rl:e"},
	}
}

// A 300ms renewed lease on a Client whose watchdog timeout is the default
// 30s: the lease in Redis is 300ms, and the watchdog keeps it past several
// leases, for every primitive, alongside holds of the default lease and of
// another renewed lease on the same Client.
//
// It runs in the serial stage (not parallel): its leases of 300ms are
// renewed every 100ms and lost when no renewal lands within 270ms, and
// beside the parallel tests under the race detector on a busy machine a
// renewal was once kept off a CPU that long (the hold was rightly told it
// was lost). Alone in the process it needs only its own CPU.
func TestRenewedLeaseStaysHeld(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	c, other := e.client(t), e.client(t)
	rdb := e.rdb(t)
	const d = 300 * time.Millisecond
	long, err := c.Mutex("rl:default").Lock(bg)
	require.NoError(t, err)
	mid, err := c.Mutex("rl:1s", WithRenewedLease(time.Second)).Lock(bg)
	require.NoError(t, err)
	cases := renewedCases(t)
	ctxs := make([]context.Context, len(cases))
	for i, k := range cases {
		ctxs[i], err = k.hold(c, d)
		require.NoError(t, err, k.name)
		ttl, err := rdb.PTTL(bg, k.key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, ttl, d, "%s: the lease in Redis is d, not the Client's 30s", k.name)
		assert.Positive(t, ttl, k.name)
	}
	time.Sleep(4 * d)
	for i, k := range cases {
		require.NoError(t, ctxs[i].Err(), "%s: held past four leases", k.name)
		assert.False(t, k.try(other), "%s: another Client cannot take it", k.name)
		ttl, err := rdb.PTTL(bg, k.key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, ttl, d, k.name)
		assert.Positive(t, ttl, k.name)
	}
	require.NoError(t, long.Err())
	require.NoError(t, mid.Err())
	ttl, err := rdb.PTTL(bg, "rl:default").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 20*time.Second, "the default lease stays the Client's")
	ttl, err = rdb.PTTL(bg, "rl:1s").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, time.Second)
	assert.Positive(t, ttl)

	// A re-entry through a handle with another lease is refused.
	_, err = c.Mutex("rl:m").Lock(ctxs[0])
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = c.Mutex("rl:m", WithRenewedLease(time.Second)).Lock(ctxs[0])
	assert.ErrorIs(t, err, ErrInvalid)
	rctx, err := c.Mutex("rl:m", WithRenewedLease(d)).Lock(ctxs[0])
	require.NoError(t, err)
	require.NoError(t, c.Mutex("rl:m", WithRenewedLease(d)).Unlock(rctx))

	// WithLease and WithRenewedLease together, and bad leases, are refused.
	for _, opts := range [][]MutexOption{
		{WithLease(time.Second), WithRenewedLease(time.Second)},
		{WithRenewedLease(0)}, {WithRenewedLease(time.Millisecond)}, {WithRenewedLease(2 * MaxLease)},
	} {
		_, err := c.Mutex("rl:bad", opts...).TryLock(bg)
		assert.ErrorIs(t, err, ErrInvalid)
	}
}

// Redis silent: a holder with a 1s renewed lease on a 30s Client is told
// (ErrLeaseLost) before its 1s lease can have run out in Redis, not 30s
// later: a rival waiting on Redis takes the lock when Redis frees it, and
// finds the holder's context already ended (an order, whatever the load).
func TestRenewedLeaseToldWhenSilent(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	p := newProxy(t, e.addr)
	c := newClient(t, newRDB(t, p.Addr()))
	const d = time.Second
	m := c.Mutex("rl:silent", WithRenewedLease(d))
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	locked := time.Now()
	lag := watchLag(t)
	p.Blackhole(true)
	defer healProxy(p)
	other := e.client(t).Mutex("rl:silent")
	var took time.Duration
	held := rivalTakes(t, lctx, 5*time.Second, func(wctx context.Context) (func() error, error) {
		octx, err := other.Lock(wctx)
		took = time.Since(locked)
		return func() error { return other.Unlock(octx) }, err
	})
	assert.Error(t, held(), "told before the lease can have run out in Redis")
	assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
	// Redis frees it within d of the last renewal (its lease is d, not
	// the Client's 30s), plus what the machine delayed the rival's wake-up.
	lag.Stop()
	assert.Less(t, took, d+500*time.Millisecond+lag.Slack(), "free within about d (the machine's worst delay meanwhile: %v)", lag.Worst())
}

// Holds of a renewed lease are renewed in batches, as the Client's
// default ones: 200 holds of 300ms take one pipeline per round, every
// round renews all of them, and a hold of another lease joins their
// rounds rather than adding rounds of its own (in a pipeline of its own,
// after theirs: see TestShortRenewedLeaseNotInALongLeasesPipeline).
//
// It runs in the serial stage (not parallel), as TestRenewedLeaseStaysHeld
// does: its 300ms leases are lost, rightly, when a renewal is kept off the
// CPU for 270ms, and beside the parallel tests and two busy loops rounds
// of 197 of the 200 holds were seen (three had been lost that way).
func TestRenewedLeaseRenewsInBatches(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	// A round's start is when its report came less what it took (a
	// little later than the round began: the report comes after Took is
	// measured).
	type round struct {
		RenewalEvent
		start time.Time
	}
	var mu sync.Mutex
	var rounds []round
	c := e.client(t, WithObserver(&Observer{Renewed: func(r RenewalEvent) {
		mu.Lock()
		rounds = append(rounds, round{r, time.Now().Add(-r.Took)})
		mu.Unlock()
	}}))
	lag := watchLag(t)
	const n, d = 200, 300 * time.Millisecond
	for i := range n {
		_, err := c.Mutex(fmt.Sprintf("rl:batch:%d", i), WithRenewedLease(d)).Lock(bg)
		require.NoError(t, err)
	}
	_, err := c.Mutex("rl:batch:long", WithRenewedLease(3*d)).Lock(bg)
	require.NoError(t, err)
	// The rounds counted are those that took their holds once every hold
	// was in. On a loaded machine taking the 201 locks can outlast d/3,
	// and a round then renews those taken so far (rightly); it may report
	// well after the last Lock returned (a round of 195 holds was once
	// told d/2 after it). A round's start as reckoned here can be later
	// than its true start by the machine's scheduling delay: the rounds
	// reckoned to start within Slack of the last Lock are not counted.
	in := time.Now()
	for time.Since(in) < 6*d+lag.Slack() {
		time.Sleep(10 * time.Millisecond)
	}
	lag.Stop()
	from := in.Add(lag.Slack())
	mu.Lock()
	defer mu.Unlock()
	var counted []RenewalEvent
	for _, r := range rounds {
		if !r.start.Before(from) {
			counted = append(counted, r.RenewalEvent)
		}
	}
	require.GreaterOrEqual(t, len(counted), 4, "about one round per d/3 (the machine's worst delay: %v): %v", lag.Worst(), counted)
	var joined bool
	for _, r := range counted {
		assert.GreaterOrEqual(t, r.Holds, n, "every round renews all the holds of the lease: %+v", r)
		pipes := 1
		if r.Holds == n+1 {
			pipes = 2 // the longer lease's hold, after the 200
		}
		assert.Equal(t, pipes, r.RoundTrips, "one pipeline per cadence in a round: %+v", r)
		assert.Zero(t, r.Failed+r.Lost)
		joined = joined || r.Holds == n+1
	}
	assert.True(t, joined, "the longer lease joins a round of the shorter: %v", counted)
	assert.LessOrEqual(t, len(counted), 24, "no rounds of the longer lease's own: %v", counted)
}
