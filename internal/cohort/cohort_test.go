package cohort

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The queue's bookkeeping on its own (it sends nothing): which waiter a
// lock is handed to, the bounds of a run, the yield after it, and what a
// waiter that leaves mid-hand-over leaves for whom. The hand-overs
// themselves, against redis-server, are the root package's cohort tests.

var errClosed = errors.New("test: closed")

// waiter joins q on channel for lock key as a goroutine that takes
// hand-overs would, and is idle (waiting, not trying).
func waiter(q *Queue, key, channel, field string) *Entry {
	woken := make(chan struct{}, 1)
	acc := &Acceptor{Key: key, Lease: time.Second, Renewed: true, Field: func() string { return field },
		Take: func(*Handoff) (bool, time.Duration, error) { return true, 0, nil }}
	e := q.Join(channel, acc, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	}, woken)
	q.SetIdle(e, true)
	return e
}

func TestClaimPicksTheFirstIdleWaiterInArrivalOrder(t *testing.T) {
	q := NewQueue(errClosed)
	a := waiter(q, "k", "ch", "a")
	b := waiter(q, "k", "ch", "b")
	q.SetIdle(a, false) // a is trying: not handed the lock meanwhile
	h, mine := q.Claim("k", true)
	require.NotNil(t, h)
	assert.Equal(t, "b", h.Field)
	assert.Equal(t, 1, mine)
	assert.Same(t, h, q.SetIdle(b, false), "b is reserved for the hand-over")
	again, _ := q.Claim("k", false)
	assert.Nil(t, again, "a is trying and b is reserved: nobody to hand it to")
	q.Leave(a)
	q.Leave(b)
}

// A waiter that takes no hand-over (a MultiLock's) keeps the lock from
// being handed past it.
func TestBlockingWaiterStopsHandOversPastIt(t *testing.T) {
	q := NewQueue(errClosed)
	m := q.Join("ch", Blocking("k"), func() {}, make(chan struct{}))
	q.SetIdle(m, true)
	b := waiter(q, "k", "ch", "b")
	h, _ := q.Claim("k", true)
	assert.Nil(t, h, "handed past a waiter that takes no hand-over")
	q.Leave(m)
	h, _ = q.Claim("k", true)
	require.NotNil(t, h)
	assert.Equal(t, "b", h.Field)
	q.Leave(b)
}

// After Run hand-overs in a row the next is bounded (the lock goes to
// other clients), and once one is settled as released for them (2), this
// client's waiters hold back for Yield, on the lock and on its channel.
// The run's time bound (Time) and the yield (Yield) are milliseconds: the
// checks that read the clock are made when the machine kept up with them.
func TestRunBoundAndYield(t *testing.T) {
	q := NewQueue(errClosed)
	var last *Handoff
	var first time.Time
	for i := 0; i <= Run; i++ {
		waiter(q, "k", "ch", "w")
		h, _ := q.Claim("k", true)
		require.NotNil(t, h)
		if i == 0 {
			first = time.Now()
		}
		if i < Run {
			if time.Since(first) < Time {
				assert.False(t, h.Bounded, "hand-over %d is within the run", i+1)
			}
			require.True(t, q.Settle(h, []int64{1, 1}, nil))
		}
		last = h
	}
	assert.True(t, last.Bounded, "hand-over %d goes past the run's bound", Run+1)
	_, releasing := q.KeyYielding("k", time.Now())
	assert.True(t, releasing, "waiters hold back while the bounded release is on its way")
	settled := time.Now()
	require.True(t, q.Settle(last, []int64{2, 0}, nil))
	assert.Equal(t, Yield, last.Next, "the receiver waits out the yield")
	until, ok := q.ChanYielding("ch", time.Now())
	if time.Since(settled) < Yield {
		require.True(t, ok, "the channel's wake-ups are held back after the release")
		assert.False(t, until.Before(settled.Add(Yield)), "held back for Yield")
		assert.False(t, until.After(time.Now().Add(Yield)), "held back for Yield")
	}
	time.Sleep(2 * Yield)
	_, ok = q.KeyYielding("k", time.Now())
	assert.False(t, ok, "the yield lasts Yield")
}

// A waiter that leaves before its hand-over's outcome leaves it to the
// releaser (Settle reports false: give back what the script granted); one
// that leaves after the outcome was delivered and not taken gets it back
// from Leave, to give back itself.
func TestLeaveDuringAndAfterAHandOver(t *testing.T) {
	q := NewQueue(errClosed)
	a := waiter(q, "k", "ch", "a")
	h, _ := q.Claim("k", true)
	require.NotNil(t, h)
	assert.Nil(t, q.Leave(a), "nothing delivered yet")
	assert.False(t, q.Settle(h, []int64{1, 1}, nil), "the waiter left: the releaser gives it back")

	b := waiter(q, "k", "ch", "b")
	h, _ = q.Claim("k", true)
	require.NotNil(t, h)
	require.True(t, q.Settle(h, []int64{1, 1}, nil))
	assert.Same(t, h, q.Leave(b), "delivered, not taken: the waiter gives it back")
}

// Handed delivers the outcome once it is in, and ends with the context or
// the queue's closed error.
func TestHandedWaitsForTheOutcome(t *testing.T) {
	q := NewQueue(errClosed)
	e := waiter(q, "k", "ch", "a")
	h, _ := q.Claim("k", true)
	require.NotNil(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := q.Handed(ctx, e, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	closed := make(chan struct{})
	close(closed)
	_, err = q.Handed(context.Background(), e, closed)
	assert.ErrorIs(t, err, errClosed)
	go func() { time.Sleep(10 * time.Millisecond); q.Settle(h, []int64{1, 1}, nil) }()
	got, err := q.Handed(context.Background(), e, nil)
	require.NoError(t, err)
	assert.Same(t, h, got)
	assert.True(t, got.Granted)
	q.Leave(e)
}
