package lease

import (
	"context"
	"slices"
	"sync"
)

// HoldLock is a hold's lock (hold.mu): it serialises the scripts that
// change the hold, as a mutex would, but a caller waiting for it can leave
// when its context ends. The lock may be kept past its caller's return,
// until a reply that caller left behind comes (see
// holds.Machine.UnderHold), so a wait for it must be bounded like any
// other wait. Waiters take it in the order they came. The zero HoldLock is
// unlocked, and taking it when it is free allocates nothing.
type HoldLock struct {
	mu   sync.Mutex
	held bool
	q    []chan struct{} // its waiters, in order: each is handed the lock by a close
}

// TryLock takes l if it is free, and reports whether it did.
func (l *HoldLock) TryLock() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return false
	}
	l.held = true
	return true
}

// Lock takes l, waiting as long as it takes: for a caller that cannot
// leave, or that is bounded otherwise.
func (l *HoldLock) Lock() {
	if ch := l.enqueue(); ch != nil {
		<-ch
	}
}

// enqueue takes l when it is free (nil), or queues a waiter, whose
// channel is closed when the lock is handed to it.
func (l *HoldLock) enqueue() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		l.held = true
		return nil
	}
	ch := make(chan struct{})
	l.q = append(l.q, ch)
	return ch
}

// LockCtx takes l, or returns ctx's error, without taking it, once ctx
// has ended (at once when it already has).
func (l *HoldLock) LockCtx(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ch := l.enqueue()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if i := slices.Index(l.q, ch); i >= 0 {
		l.q = slices.Delete(l.q, i, i+1)
		l.mu.Unlock()
		return ctx.Err()
	}
	l.mu.Unlock()
	l.Unlock() // handed to this waiter as its context ended: on to the next
	return ctx.Err()
}

// Unlock releases l, which must be held (by anyone: a late reply's
// handler may release what its caller took), handing it to its first
// waiter if it has one.
func (l *HoldLock) Unlock() {
	l.mu.Lock()
	if !l.held {
		l.mu.Unlock()
		panic("redisync: unlock of a hold's lock that is not held")
	}
	if len(l.q) == 0 {
		l.held = false
		l.mu.Unlock()
		return
	}
	ch := l.q[0]
	l.q = slices.Delete(l.q, 0, 1)
	l.mu.Unlock()
	close(ch) // held still: it is the waiter's now
}
