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
// every primitive. (The engine never writes a release twice, so the
// missing state is never its own first write's doing:
// TestLostReplyReleaseIsWrittenOnce.)
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
