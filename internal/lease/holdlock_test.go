package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hold's lock is handed to its waiters in the order they came; a waiter
// whose context ends leaves the queue, taking nothing; a free lock is
// taken without an allocation.
func TestHoldLockOrderAndLeaving(t *testing.T) {
	var l HoldLock
	require.NoError(t, l.LockCtx(bg))
	assert.False(t, l.TryLock(), "held")

	got := make(chan int, 3)
	wait := func(i int, ctx context.Context) {
		err := l.LockCtx(ctx)
		if err == nil {
			got <- i
		} else {
			got <- -i
		}
	}
	queued := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.q) == n }, time.Second, time.Millisecond)
	}
	go wait(1, bg)
	queued(1)
	leaving, leave := context.WithCancel(bg)
	go wait(2, leaving)
	queued(2)
	go wait(3, bg)
	queued(3)
	leave()
	assert.Equal(t, -2, <-got, "the waiter whose context ended leaves")
	queued(2)

	l.Unlock()
	assert.Equal(t, 1, <-got, "the first waiter first")
	l.Unlock()
	assert.Equal(t, 3, <-got)
	l.Unlock()
	assert.True(t, l.TryLock(), "free once its last holder unlocks")
	l.Unlock()

	ended, cancel := context.WithCancel(bg)
	cancel()
	assert.ErrorIs(t, l.LockCtx(ended), context.Canceled, "a context already ended takes nothing")
	assert.True(t, l.TryLock())
	l.Unlock()
	assert.Panics(t, l.Unlock, "an unlock of a free lock")

	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = l.LockCtx(bg)
		l.Unlock()
	}))
}

// A waiter handed the lock as its context ends hands it on: the lock is
// never left held by a caller that returned an error.
func TestHoldLockHandedAsItsWaiterLeaves(t *testing.T) {
	for range 200 {
		var l HoldLock
		l.Lock()
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { errc <- l.LockCtx(ctx) }()
		require.Eventually(t, func() bool { l.mu.Lock(); defer l.mu.Unlock(); return len(l.q) == 1 }, time.Second, time.Microsecond)
		go cancel()
		l.Unlock() // races the cancel
		if err := <-errc; err == nil {
			l.Unlock() // the waiter took it
		}
		require.True(t, l.TryLock(), "nobody keeps the lock")
	}
}

// Args keeps a hold's call arguments in the hold while it has room, and
// never writes what it returned again; past its room it makes new slices.
func TestHoldArgs(t *testing.T) {
	var h Hold
	field := any("owner:1")
	var all [][]any
	for i := range argRoom { // more than the room holds
		all = append(all, h.Args(field, i))
	}
	for i, a := range all {
		assert.Equal(t, []any{field, i}, a, "call %d's arguments", i)
		assert.Len(t, a, 2)
		assert.Equal(t, 2, cap(a), "an append makes a copy")
	}
	var fresh Hold
	assert.Zero(t, testing.AllocsPerRun(1, func() { _ = fresh.Args(field, 30000, "publish", field) }))
}
