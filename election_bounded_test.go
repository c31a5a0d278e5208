package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// TryCampaignFor bounds the wait only: a leadership won within the bound
// lasts past it, as long as the context it was won with.
func TestElectionTryCampaignForOutlivesTheWait(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		a, b := e.client(t).Election("bounded:outlives"), e.client(t).Election("bounded:outlives")
		actx, err := a.Campaign(bg, "a")
		require.NoError(t, err)
		aterm, _ := a.Term(actx)

		const wait = 400 * time.Millisecond
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			assert.NoError(t, a.Resign(actx))
		}()
		bctx, err := b.TryCampaignFor(bg, "b", wait)
		require.NoError(t, err, "b leads once a resigns, within the bound")
		bterm, ok := b.Term(bctx)
		require.True(t, ok)
		assert.Greater(t, bterm, aterm)

		time.Sleep(time.Until(start.Add(2 * wait)))
		require.NoError(t, bctx.Err(), "the leadership outlives the wait bound")
		l, err := b.Leader(bg)
		require.NoError(t, err)
		assert.Equal(t, Leadership{Value: "b", Term: bterm}, l)
		require.NoError(t, b.Resign(bctx))

		// A free election is won at once, and its leadership too outlives
		// the bound.
		cctx, err := b.TryCampaignFor(bg, "c", 50*time.Millisecond)
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, cctx.Err())
		require.NoError(t, b.Resign(cctx))

		// It is bound to the context it was won with, as TryLockFor's hold.
		ctx, cancel := context.WithCancel(bg)
		dctx, err := b.TryCampaignFor(ctx, "d", time.Second)
		require.NoError(t, err)
		cancel()
		<-dctx.Done()
		eventually(t, time.Second, "the election free once its campaign's context ended", func() bool {
			l, err := b.Leader(bg)
			return err == nil && l.Term == 0
		})
	})
}

// A bounded campaign that times out returns ErrNotAcquired (not the
// context's error) and a nil context after about the bound, and leaves no
// candidate behind: nothing in Redis changed, no wait left subscribed, and
// when the leader resigns nobody leads.
func TestElectionTryCampaignForTimesOut(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		a, b := e.client(t).Election("bounded:out"), c.Election("bounded:out")
		actx, err := a.Campaign(bg, "a")
		require.NoError(t, err)
		before := redisState(t, e)

		const wait = 200 * time.Millisecond
		lag := watchLag(t)
		start := time.Now()
		got, err := b.TryCampaignFor(bg, "b", wait)
		took := time.Since(start)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "only the wait ran out")
		assert.Contains(t, err.Error(), "bounded:out")
		assert.Nil(t, got)
		assert.GreaterOrEqual(t, took, wait)
		assert.Less(t, took, wait+700*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
		assert.Equal(t, before, redisState(t, e), "no candidate entry left")
		noLocalWaiters(t, c)

		// The context ends before the bound: its error, not ErrNotAcquired.
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		got, err = b.TryCampaignFor(ctx, "b", 5*time.Second)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrNotAcquired)
		assert.Nil(t, got)

		for _, d := range []time.Duration{0, -time.Second} {
			got, err = b.TryCampaignFor(bg, "b", d)
			assert.ErrorIs(t, err, ErrInvalid, "wait %v", d)
			assert.Nil(t, got)
		}

		require.NoError(t, a.Resign(actx))
		time.Sleep(100 * time.Millisecond)
		l, err := a.Leader(bg)
		require.NoError(t, err)
		assert.Zero(t, l.Term, "nobody leads: the timed-out candidate left nothing behind")
		noLocalWaiters(t, c)
	})
}

// The bound ends while the winning campaign's reply is on its way (Redis
// made the candidate leader, its reply is late): the call returns
// ErrNotAcquired at its bound, and the late leadership is given back as
// soon as its reply comes, not kept for a lease by nobody. With Redis
// silent, the call still returns at its bound.
func TestElectionTryCampaignForLateReply(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.ElectCampaign.Load(bg, rdb).Err())
	// The reply comes late by a second and a half: a call that waited
	// for it takes longer than that, one that returns at its bound does
	// not (an order, whatever delays a loaded machine adds to the call).
	const late = 1500 * time.Millisecond
	slow := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.ElectCampaign.Script), Times: 1, Action: faultproxy.DelayReply(late)})
	b := c.Election("bounded:late")
	watch := e.client(t).Election("bounded:late")

	const wait = 200 * time.Millisecond
	start := time.Now()
	got, err := b.TryCampaignFor(bg, "b", wait)
	took := time.Since(start)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.Nil(t, got)
	assert.Less(t, took, late, "returns at its bound, not with the late reply")
	require.Equal(t, 1, slow.Fired(), "the campaign's reply delayed")
	eventually(t, 5*time.Second, "the late leadership given back", func() bool {
		st, err := watch.read(bg)
		return err == nil && st.Term == 0
	})
	st, err := watch.read(bg)
	require.NoError(t, err)
	assert.Positive(t, st.last, "the script ran: Redis made b leader (term %d), then it was given back", st.last)
	wctx, err := watch.TryCampaignFor(bg, "w", 100*time.Millisecond)
	require.NoError(t, err, "the election is free at once, not after a lease")
	require.NoError(t, watch.Resign(wctx))

	// Redis silent: the bound still ends the call.
	p := newProxy(t, e.addr)
	silent := newClient(t, newRDB(t, p.Addr())).Election("bounded:late")
	p.Blackhole(true)
	lag := watchLag(t) // the machine's scheduling delay, added to the bound
	start = time.Now()
	got, err = silent.TryCampaignFor(bg, "s", wait)
	took = time.Since(start)
	healProxy(p)
	require.ErrorIs(t, err, ErrNotAcquired)
	assert.Nil(t, got)
	assert.Less(t, took, wait+700*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
}
