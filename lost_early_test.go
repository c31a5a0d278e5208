package redisync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// Issue 24: the last release of a hold that Redis lost before the hold's
// local deadline (another process forced it, Redis lost its data, a key
// deleted by hand) reports the loss, ErrLeaseLost (and ErrNotHeld), on
// every primitive, instead of taking the missing state for its own release
// resent by go-redis (that case stays quiet: TestResentLastUnlockSucceeds).
func TestUnlockOfHoldLostEarlyReportsIt(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c := e.client(t)
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		hctx, err := mine.lock(bg)
		require.NoError(t, err)
		loseInRedis(t, e, name)
		err = mine.unlock(hctx)
		assert.ErrorIs(t, err, ErrLeaseLost, "the Unlock of a hold Redis lost said %v", err)
		assert.ErrorIs(t, err, ErrNotHeld)
		assert.Error(t, hctx.Err(), "the hold's context is still live")
	})
}

// The same for an Election's leadership, lost in Redis while its leader
// still believed it led: Resign says so.
func TestResignOfLeadershipLostEarlyReportsIt(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c := e.client(t)
		el := c.Election("lost-early")
		lctx, err := el.Campaign(context.Background(), "me")
		require.NoError(t, err)
		loseInRedis(t, e, "lost-early")
		err = el.Resign(lctx)
		assert.ErrorIs(t, err, ErrLeaseLost, "the Resign of a leadership Redis lost said %v", err)
		assert.ErrorIs(t, err, ErrNotHeld)
	})
}

// loseInRedis deletes every key whose name contains name, as a restart
// without data, or a key deleted by hand, would lose them.
func loseInRedis(t *testing.T, e *testEnv, name string) {
	t.Helper()
	rdb := e.rdb(t)
	for _, key := range e.keys(t) {
		if strings.Contains(key, name) {
			require.NoError(t, rdb.Del(context.Background(), key).Err())
		}
	}
}

// A last Unlock that hands the lock to a local waiter (cohort handoff)
// tells the two cases apart as the unlock script's callers do: written
// once, a releaser's hold found gone was lost (TestCohortLeaseLostMidHandoff);
// written twice by go-redis (Resend), the hold it finds gone was released
// by its own first write, and Unlock succeeds.
func TestResentHandoffSucceeds(t *testing.T) {
	e := realEnv(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	c := newClient(t, rdb)
	c.scriptHandoff = true // the script is what go-redis resends
	m := c.Mutex("handoff-resent")
	require.NoError(t, lua.Handoff.Load(context.Background(), e.rdb(t)).Err())
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	w := idleWaiter(t, context.Background(), c, m)
	r := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Handoff.Script), Times: 1, Action: faultproxy.Resend()})
	require.NoError(t, m.Unlock(hctx), "a resent handoff reported the hold lost")
	require.Equal(t, 1, r.Fired())
	got := <-w
	require.NoError(t, got.err)
	require.NoError(t, m.Unlock(got.hctx))
}

// What go-redis itself does: its connection closed after the last
// Unlock's script was written (Redis ran it, the reply is lost), go-redis
// writes the pipeline again on a new connection, and the script finds the
// hold gone. Written twice, the release succeeds, as it did; the lock is
// free.
func TestLastUnlockRetriedByGoRedisSucceeds(t *testing.T) {
	e := realEnv(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	c := newClient(t, rdb)
	m := c.Mutex("unlock-retried")
	require.NoError(t, lua.Unlock.Load(context.Background(), e.rdb(t)).Err()) // EVALSHA runs it
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	sha := lua.Unlock.Hash()
	r := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Action: faultproxy.CloseAfterWrite(),
		Args: func(args []string) bool { return len(args) > 1 && args[1] == sha }})
	require.NoError(t, m.Unlock(hctx), "go-redis's retry of a last Unlock that ran reported the hold lost")
	require.Equal(t, 1, r.Fired())
	locked, err := m.IsLocked(context.Background())
	require.NoError(t, err)
	assert.False(t, locked)
}

// A last release that takes longer than what was left of the lease (its
// script slow on the way, or sent again while a slot's keys are split:
// TRYAGAIN) finds the hold gone because it lapsed after the Unlock began
// (renewals stop then), not because Redis lost it before: it succeeds.
// (The matrix's resharding group found it: an RWMutex write Unlock said
// its lease was lost after 1.4 s of TRYAGAIN.)
func TestLastReleaseThatLapsedDuringItSucceeds(t *testing.T) {
	e := realEnv(t)
	rdb, h := faultRDB(t, &redis.Options{Addr: e.srv.Addr()})
	const lease = 300 * time.Millisecond
	c := newClient(t, rdb, WithWatchdogTimeout(lease))
	m := c.Mutex("lapsed")
	require.NoError(t, lua.Unlock.Load(context.Background(), e.rdb(t)).Err())
	hctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	slow := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(lua.Unlock.Script), Times: 1,
		Action: faultproxy.DelayBefore(2 * lease)})
	require.NoError(t, m.Unlock(hctx), "a release that found its hold lapsed after it began reported it lost")
	require.Equal(t, 1, slow.Fired())
	locked, err := m.IsLocked(context.Background())
	require.NoError(t, err)
	assert.False(t, locked)
}
