package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func latchCount(t *testing.T, l *CountDownLatch) int64 {
	t.Helper()
	n, err := l.Count(context.Background())
	require.NoError(t, err)
	return n
}

func TestLatchCountDown(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		l := e.client(t).CountDownLatch("latch")

		// Never set: count 0, Wait returns at once, CountDown is harmless.
		require.EqualValues(t, 0, latchCount(t, l))
		require.NoError(t, l.Wait(bg))
		require.NoError(t, l.CountDown(bg))
		require.Empty(t, e.keys(t))

		ok, err := l.TrySetCount(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = l.TrySetCount(bg, 5)
		require.NoError(t, err)
		require.False(t, ok, "already counting")
		require.EqualValues(t, 2, latchCount(t, l))

		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 1, latchCount(t, l))
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 0, latchCount(t, l))
		require.Empty(t, e.keys(t), "the key is removed at zero")
		require.NoError(t, l.Wait(bg))

		// Below zero is harmless, and a finished latch may be set again.
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 0, latchCount(t, l))
		require.Empty(t, e.keys(t))
		ok, err = l.TrySetCount(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 1, latchCount(t, l))
	})
}

func TestLatchBadInput(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		bads := []*CountDownLatch{
			c.CountDownLatch(""), (*Client)(nil).CountDownLatch("x"),
			c.CountDownLatch("a}b"),               // its round key could not share its slot
			c.CountDownLatch("{x}:latch-round:x"), // another latch's round key
		}
		for _, bad := range bads {
			_, err := bad.TrySetCount(bg, 1)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, bad.CountDown(bg), ErrInvalid)
			_, err = bad.Count(bg)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, bad.Wait(bg), ErrInvalid)
		}
		l := c.CountDownLatch("latch")
		for _, n := range []int64{0, -1} {
			ok, err := l.TrySetCount(bg, n)
			require.ErrorIs(t, err, ErrInvalid)
			require.False(t, ok)
		}
		require.Empty(t, e.keys(t))

		// A key of another type is an error and is kept.
		require.NoError(t, e.rdb(t).HSet(bg, "h", "f", "v").Err())
		require.ErrorContains(t, c.CountDownLatch("h").CountDown(bg), "WRONGTYPE")
		require.Error(t, c.CountDownLatch("h").Wait(bg))
		require.Equal(t, []string{"h"}, e.keys(t))
		// Also at the round's key.
		round := "{r}:latch-round:r"
		require.NoError(t, e.rdb(t).HSet(bg, round, "f", "v").Err())
		_, err := c.CountDownLatch("r").TrySetCount(bg, 1)
		require.ErrorContains(t, err, "WRONGTYPE")
		require.Contains(t, err.Error(), round)
		require.Equal(t, []string{"h", round}, e.keys(t))

		require.NoError(t, c.Close())
		require.ErrorIs(t, l.Wait(bg), ErrClosed)
	})
}

// TestLatchReleasesWaitersInSeveralClients: the CountDown that reaches zero
// releases every waiter in every process at once (by message), and none
// before.
func TestLatchReleasesWaitersInSeveralClients(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const clients, perClient = 3, 5
		bg := context.Background()
		counter := e.client(t).CountDownLatch("latch")
		ok, err := counter.TrySetCount(bg, 3)
		require.NoError(t, err)
		require.True(t, ok)

		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		released := make(chan time.Time, clients*perClient)
		var wg sync.WaitGroup
		var cs []*Client
		for range clients {
			c := e.client(t)
			cs = append(cs, c)
			l := c.CountDownLatch("latch")
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if assert.NoError(t, l.Wait(ctx)) {
						released <- time.Now()
					}
				}()
			}
		}
		for _, c := range cs {
			eventually(t, 2*time.Second, "waiters subscribed", func() bool {
				return semSubscribed(c, "redisync_latch__channel:{latch}", perClient)
			})
		}
		require.NoError(t, counter.CountDown(bg))
		require.NoError(t, counter.CountDown(bg))
		select {
		case <-released:
			t.Fatal("a waiter was released before the count reached zero")
		case <-time.After(latchRecheck + 200*time.Millisecond): // past a re-check
		}
		lag := watchLag(t)
		zero := time.Now()
		require.NoError(t, counter.CountDown(bg))
		wg.Wait()
		close(released)
		n := 0
		for at := range released {
			n++
			require.Less(t, at.Sub(zero), latchRecheck/2+lag.Slack(),
				"a waiter waited for its re-check, not the message (the machine's worst delay meanwhile: %v)", lag.Worst())
		}
		require.Equal(t, clients*perClient, n)
		for _, c := range cs {
			require.Equal(t, 0, semWaiters(c))
		}
	})
}

// TestLatchWaitEndsWithContext: a wait returns its context's error and
// leaves no waiter behind.
func TestLatchWaitEndsWithContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		l := c.CountDownLatch("latch")
		_, err := l.TrySetCount(bg, 1)
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, l.Wait(ctx), context.DeadlineExceeded)
		require.Equal(t, 0, semWaiters(c))
		require.ErrorIs(t, l.Wait(ctx), context.DeadlineExceeded, "an ended context is refused")
		require.EqualValues(t, 1, latchCount(t, l))
	})
}

// TestLatchLostMessage: a latch that reaches zero without a message (here
// deleted behind the library's back) still releases its waiter, within the
// bounded re-check.
func TestLatchLostMessage(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		l := c.CountDownLatch("latch")
		_, err := l.TrySetCount(bg, 1)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(bg, latchRecheck+time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- l.Wait(ctx) }()
		eventually(t, time.Second, "waiter subscribed", func() bool { return semSubscribed(c, l.channel, 1) })
		require.NoError(t, e.rdb(t).Del(bg, "latch").Err()) // no message
		require.NoError(t, <-done)
	})
}

// TestLatchKilledSubscription: a latch wait survives its subscription's
// connection being killed.
func TestLatchKilledSubscription(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	c := e.client(t)
	l := c.CountDownLatch("latch")
	_, err := l.TrySetCount(bg, 1)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, latchRecheck+time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	eventually(t, time.Second, "waiter subscribed", func() bool { return semSubscribed(c, l.channel, 1) })

	n, err := e.rdb(t).ClientKillByFilter(bg, "TYPE", "pubsub").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, e.client(t).CountDownLatch("latch").CountDown(bg))
	require.NoError(t, <-done)

	// The client's subscription works again afterwards.
	_, err = l.TrySetCount(bg, 1)
	require.NoError(t, err)
	go func() { done <- l.Wait(ctx) }()
	eventually(t, time.Second, "waiter subscribed again", func() bool { return semSubscribed(c, l.channel, 1) })
	require.NoError(t, l.CountDown(bg))
	require.NoError(t, <-done)
}
