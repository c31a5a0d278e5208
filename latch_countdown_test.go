package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// TestLatchCountDownWithEndedContextDoesNotCount: a CountDown whose context
// had ended before the call returns the context's error and does not count,
// so calling it again is safe (its doc's promise). The same holds for
// TrySetCount and Delete.
func TestLatchCountDownWithEndedContextDoesNotCount(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		l := e.client(t).CountDownLatch("latch:ended")
		_, err := l.TrySetCount(bg, 2)
		require.NoError(t, err)
		ended, cancel := context.WithCancel(bg)
		cancel()
		for range 3 {
			require.ErrorIs(t, l.CountDown(ended), context.Canceled)
		}
		_, err = l.Delete(ended)
		require.ErrorIs(t, err, context.Canceled)
		time.Sleep(200 * time.Millisecond) // nothing on its way either
		require.EqualValues(t, 2, latchCount(t, l), "nothing counted, nothing deleted")

		require.NoError(t, l.CountDown(bg))
		require.NoError(t, l.CountDown(bg))
		_, err = l.TrySetCount(ended, 1)
		require.ErrorIs(t, err, context.Canceled)
		time.Sleep(200 * time.Millisecond)
		require.EqualValues(t, 0, latchCount(t, l), "nothing set")
		require.Empty(t, e.keys(t))
	})
}

// TestLatchCountDownAbandonedCountsAtMostOnce: a CountDown whose context
// ends while it is on its way returns the context's error, and Redis counts
// it at most once: what its doc tells the caller not to retry.
func TestLatchCountDownAbandonedCountsAtMostOnce(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		// The reply comes late, long after the bound below, so that the
		// bound tells "with its context" from "with the reply" even with a
		// loaded machine's delay added to it.
		const late = time.Second
		hook := faultproxy.NewHook()
		rdb := e.rdb(t)
		gate(rdb, hook)
		l := newClient(t, rdb).CountDownLatch("latch:abandoned")
		_, err := l.TrySetCount(bg, 3)
		require.NoError(t, err)
		slow := hook.OnCommand(faultproxy.CommandRule{
			Args:   faultproxy.RunsScript(lua.LatchCountDown.Script),
			Times:  1,
			Action: faultproxy.DelayReply(late),
		})
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		lag := watchLag(t) // the machine's scheduling delay, added to the bound
		start := time.Now()
		require.ErrorIs(t, l.CountDown(ctx), context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 250*time.Millisecond+lag.Slack(),
			"returns with its context, not with the reply (the machine's worst delay meanwhile: %v)", lag.Worst())
		eventually(t, time.Second, "the slow reply", func() bool { return slow.Fired() == 1 })
		time.Sleep(late + 200*time.Millisecond) // past the late reply: nothing sent again
		require.EqualValues(t, 2, latchCount(t, l), "counted once")
	})
}
