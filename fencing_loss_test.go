package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 19, item 3: Redis restarts without its data while a fenced holder
// holds, so the counter is lost with the lock. The stale holder has
// written to the resource with its token; the next holder's token must
// still be higher, or the resource (which refuses a token lower than the
// highest it has seen) refuses every holder from then on.
func TestFencingTokensSurviveDataLoss(t *testing.T) {
	for _, kind := range fencedKinds {
		t.Run(kind, func(t *testing.T) {
			e := realEnv(t)
			bg := context.Background()
			name := "fence:loss:" + kind
			a := fencedLock(e.client(t), kind, name, WithFencing())
			b := fencedLock(e.client(t), kind, name, WithFencing())
			var highest int64 // the resource, outside Redis
			write := func(token int64) bool {
				if token < highest {
					return false
				}
				highest = token
				return true
			}

			actx, err := a.lock(bg)
			require.NoError(t, err)
			t1, _ := a.token(actx)
			require.True(t, write(t1))
			e.srv.Restart(t) // every key lost, the counter too

			wctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			bctx, err := b.lock(wctx)
			require.NoError(t, err)
			t2, _ := b.token(bctx)
			assert.Greater(t, t2, t1, "the first token after the loss is above every token before it")
			assert.True(t, write(t2), "the resource takes the new holder's writes")
			assert.False(t, write(t1), "and refuses the stale holder's")
			n, _ := fenceCounter(t, e.rdb(t), name)
			assert.Equal(t, t2, n, "the counter is back, at the new token")
			require.NoError(t, b.unlock(bctx))

			// Then strictly increasing again, as before the loss.
			bctx, err = b.lock(wctx)
			require.NoError(t, err)
			t3, _ := b.token(bctx)
			assert.Greater(t, t3, t2)
			require.NoError(t, b.unlock(bctx))
			_ = a.unlock(actx) // before its deadline it cannot tell (see Mutex.Unlock); its token is refused anyway
		})
	}
	// A Mutex handed to a local waiter (cohort handoff) after the loss.
	t.Run("mutex handoff", func(t *testing.T) {
		e := realEnv(t)
		bg := context.Background()
		c := e.client(t)
		m := c.Mutex("fence:loss:handoff", WithFencing())
		hctx, err := m.Lock(bg)
		require.NoError(t, err)
		t1, _ := m.Token(hctx)
		w := idleWaiter(t, bg, c, m)
		e.srv.Restart(t)
		_ = m.Unlock(hctx) // before its deadline it cannot tell (see Mutex.Unlock)
		var got faultLockResult
		select {
		case got = <-w:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
		require.NoError(t, got.err)
		t2, _ := m.Token(got.hctx)
		assert.Greater(t, t2, t1, "the handed-over token is above every token before the loss")
		require.NoError(t, m.Unlock(got.hctx))
	})
}
