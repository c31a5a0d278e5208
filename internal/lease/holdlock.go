package lease

import "context"

// HoldLock is a hold's lock (hold.mu): it serialises the scripts that
// change the hold, as a mutex would, but a caller waiting for it can leave
// when its context ends. The lock may be kept past its caller's return,
// until a reply that caller left behind comes (see
// holds.Machine.UnderHold), so a wait for it must be bounded like any
// other wait. Waiters take it in the order they came.
type HoldLock chan struct{}

func NewHoldLock() HoldLock { return make(HoldLock, 1) }

// Lock takes l, waiting as long as it takes: for a caller that cannot
// leave, or that is bounded otherwise.
func (l HoldLock) Lock() { l <- struct{}{} }

// LockCtx takes l, or returns ctx's error, without taking it, once ctx
// has ended (at once when it already has).
func (l HoldLock) LockCtx(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases l, which must be held (by anyone: a late reply's
// handler may release what its caller took).
func (l HoldLock) Unlock() {
	select {
	case <-l:
	default:
		panic("redisync: unlock of a hold's lock that is not held")
	}
}
