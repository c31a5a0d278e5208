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

// A release's context (CallCtx) carries the caller's values and ends at
// its bound, on the keeper's clock, or, for a hold whose parent can end
// and while watched, with the parent: Err says which; a hold whose
// parent never ends shares the bound's channel with every call of its
// slot (no channel of its own).
func TestCallCtxEndsAtItsBoundOrWithTheParent(t *testing.T) {
	e := newEnv(t, 30*time.Second)
	type key struct{}
	vals := context.WithValue(bg, key{}, "v")

	h := e.holdOn(t, "call:never", bg)
	start := time.Now()
	c := h.CallCtx(vals, 30*time.Millisecond)
	assert.Equal(t, "v", c.Value(key{}), "the caller's values")
	dl, ok := c.Deadline()
	require.True(t, ok)
	assert.WithinDuration(t, start.Add(30*time.Millisecond), dl, slotWidth+5*time.Millisecond)
	require.NoError(t, c.Err())
	<-c.Done()
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond, "not before its bound")
	assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	h2 := e.holdOn(t, "call:never2", bg)
	d1, _ := h2.CallCtx(bg, time.Hour).Deadline()
	c2 := h2.CallCtx(bg, time.Hour)
	d2, _ := c2.Deadline()
	if d1.Equal(d2) {
		assert.Equal(t, h2.call.done, c2.Done(), "one channel for the calls of a slot")
	}

	parent, cancel := context.WithCancel(bg)
	defer cancel()
	hp := e.holdOn(t, "call:parent", parent)
	c3 := hp.CallCtx(vals, time.Hour)
	require.NoError(t, c3.Err())
	hp.Unwatch()
	e.k.EndUntold(hp, EndUnlocked) // a last release ends its hold first
	cancel()
	time.Sleep(20 * time.Millisecond)
	assert.NoError(t, c3.Err(), "unwatched: the parent's end does not end it")
	assert.False(t, hp.CallParentEnded())

	parent2, cancel2 := context.WithCancel(bg)
	hq := e.holdOn(t, "call:parent2", parent2)
	c4 := hq.CallCtx(vals, time.Hour)
	cancel2() // the keeper's watch of the parent ends the call
	select {
	case <-c4.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's end did not end the call")
	}
	assert.ErrorIs(t, c4.Err(), context.Canceled)
	assert.True(t, hq.CallParentEnded())

	parent3, cancel3 := context.WithCancel(bg)
	hr := e.holdOn(t, "call:parent3", parent3)
	c5 := hr.CallCtx(vals, time.Hour)
	hr.Unwatch()
	e.k.EndUntold(hr, EndUnlocked)
	stop := hr.WatchParent() // watched again, once the hold has ended
	defer stop()
	cancel3()
	select {
	case <-c5.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's end did not end the call watched again")
	}
	assert.True(t, hr.CallParentEnded())

	parent4, cancel4 := context.WithCancel(bg)
	defer cancel4()
	hs := e.holdOn(t, "call:gen", parent4)
	old := hs.CallCtx(vals, 20*time.Millisecond)
	_ = old
	hs.call.mu.Lock()
	oldGen := hs.call.gen
	hs.call.mu.Unlock()
	c6 := hs.CallCtx(vals, time.Hour)
	hs.call.end(callBound, oldGen) // an earlier call's bound, late
	time.Sleep(40 * time.Millisecond)
	assert.NoError(t, c6.Err(), "a call is ended by its own bound only")
}
