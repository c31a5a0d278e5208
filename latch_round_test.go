package redisync

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
)

// latchEnds are the two ways a round of a latch ends: its last CountDown,
// and Delete (the reset its doc suggests).
var latchEnds = []struct {
	name string
	end  func(ctx context.Context, l *CountDownLatch) error
}{
	{"CountDown", func(ctx context.Context, l *CountDownLatch) error { return l.CountDown(ctx) }},
	{"Delete", func(ctx context.Context, l *CountDownLatch) error {
		ok, err := l.Delete(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("Delete found the latch not counting")
		}
		return err
	}},
}

// TestLatchSetAgainRightAfterRoundEnds: a latch set again right after its
// round ended (the last CountDown or Delete, then TrySetCount at once)
// releases every waiter of the ended round, promptly, in every process;
// the new round's waiters wait for their own round.
func TestLatchSetAgainRightAfterRoundEnds(t *testing.T) {
	for _, end := range latchEnds {
		t.Run(end.name, func(t *testing.T) {
			forEachEnv(t, func(t *testing.T, e *testEnv) {
				const name = "latch:again"
				const clients, perClient = 2, 4
				bg := context.Background()
				counter := e.client(t).CountDownLatch(name)
				ok, err := counter.TrySetCount(bg, 1)
				require.NoError(t, err)
				require.True(t, ok)

				ctx, cancel := context.WithTimeout(bg, 5*time.Second)
				defer cancel()
				type result struct {
					err error
					at  time.Time
				}
				results := make(chan result, clients*perClient)
				var cs []*Client
				for range clients {
					c := e.client(t)
					cs = append(cs, c)
					l := c.CountDownLatch(name)
					for range perClient {
						go func() {
							err := l.Wait(ctx)
							results <- result{err, time.Now()}
						}()
					}
				}
				for _, c := range cs {
					eventually(t, 2*time.Second, "waiters subscribed", func() bool {
						return semSubscribed(c, counter.channel, perClient)
					})
				}
				lag := watchLag(t)
				ended := time.Now()
				require.NoError(t, end.end(bg, counter))
				ok, err = counter.TrySetCount(bg, 1)
				require.NoError(t, err)
				require.True(t, ok, "set again")

				stuck := 0
				for range clients * perClient {
					r := <-results
					if r.err != nil {
						stuck++
						t.Logf("a waiter of the ended round returned %v after %v", r.err, r.at.Sub(ended).Round(time.Millisecond))
						continue
					}
					assert.Less(t, r.at.Sub(ended), latchRecheck+time.Second+lag.Slack(), "released within a re-check (the machine's worst delay meanwhile: %v)", lag.Worst())
				}
				require.Zero(t, stuck, "waiters of the ended round that sat out their context, of %d", clients*perClient)

				// The new round is counting, and its waiters wait for it.
				assert.EqualValues(t, 1, latchCount(t, counter))
				short, cancelShort := context.WithTimeout(bg, 300*time.Millisecond)
				defer cancelShort()
				require.ErrorIs(t, cs[0].CountDownLatch(name).Wait(short), context.DeadlineExceeded)
				done := make(chan error, 1)
				go func() { done <- cs[1].CountDownLatch(name).Wait(ctx) }()
				eventually(t, 2*time.Second, "new round's waiter subscribed", func() bool {
					return semSubscribed(cs[1], counter.channel, 1)
				})
				require.NoError(t, counter.CountDown(bg))
				require.NoError(t, <-done)
				assert.Empty(t, e.keys(t), "nothing left once the round ended")
			})
		})
	}
}

// TestLatchRoundEndSeenAfterLateLook: a waiter that looks again only after
// the latch was set again (each of its looks reaches Redis 300ms late:
// the message wakes it, but its look comes after the new round began)
// still sees that its round ended.
func TestLatchRoundEndSeenAfterLateLook(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	for _, end := range latchEnds {
		t.Run(end.name, func(t *testing.T) {
			forEachEnv(t, func(t *testing.T, e *testEnv) {
				const name = "latch:late"
				bg := context.Background()
				counter := e.client(t).CountDownLatch(name)
				_, err := counter.TrySetCount(bg, 2)
				require.NoError(t, err)
				require.NoError(t, counter.CountDown(bg))

				hook := faultproxy.NewHook()
				rdb := e.rdb(t)
				gate(rdb, hook)
				looks := hook.OnCommand(faultproxy.CommandRule{
					Args:   func(args []any) bool { return slices.Contains(args, any(name)) }, // its looks at the latch
					Action: faultproxy.DelayBefore(300 * time.Millisecond),
				})
				c := newClient(t, rdb)
				ctx, cancel := context.WithTimeout(bg, 3*time.Second)
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- c.CountDownLatch(name).Wait(ctx) }()
				eventually(t, 2*time.Second, "waiter subscribed", func() bool {
					return semSubscribed(c, counter.channel, 1)
				})

				require.NoError(t, end.end(bg, counter))
				ok, err := counter.TrySetCount(bg, 3)
				require.NoError(t, err)
				require.True(t, ok)
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(latchRecheck + time.Second):
					t.Fatal("the waiter of the ended round still waits on the next round")
				}
				require.EqualValues(t, 3, latchCount(t, counter))
				require.Positive(t, looks.Fired(), "the waiter's looks held back")
			})
		})
	}
}

// TestLatchLostDataThenSetAgain: when Redis loses the latch (here FLUSHALL:
// no message) and the latch is set again before its waiter looks, the
// waiter still returns at its next look, as its doc says.
func TestLatchLostDataThenSetAgain(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const name = "latch:lost"
		bg := context.Background()
		c := e.client(t)
		l := c.CountDownLatch(name)
		_, err := l.TrySetCount(bg, 2)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- l.Wait(ctx) }()
		eventually(t, 2*time.Second, "waiter subscribed", func() bool { return semSubscribed(c, l.channel, 1) })

		lag := watchLag(t)
		lost := time.Now()
		require.NoError(t, e.rdb(t).FlushAll(bg).Err())
		ok, err := e.client(t).CountDownLatch(name).TrySetCount(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, <-done)
		assert.Less(t, time.Since(lost), latchRecheck+time.Second+lag.Slack(), "at its next look (the machine's worst delay meanwhile: %v)", lag.Worst())
	})
}
