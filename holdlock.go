package redisync

import "context"

// HoldLock is a hold's lock (hold.mu): it serialises the scripts that
// change the hold, as a mutex would, but a caller waiting for it can leave
// when its context ends. The lock may be kept past its caller's return,
// until a reply that caller left behind comes (see underHold), so a wait
// for it must be bounded like any other wait. Waiters take it in the
// order they came.
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

// pending is a release that is not a hold's last, under the hold's lock,
// which release hands to releaseBy in its context: when the release's
// caller leaves before the reply (releaseTimeout), left is set and the
// hold's lock stays held until the reply comes; late applies the reply
// then, as release would have, and releases the lock. The scripts set
// counts rather than add to them, so the order they land in matters: with
// the lock kept until the reply, no later script through the hold can be
// overtaken by this one.
type pending struct {
	c        *Client
	h        *Hold
	count, n int  // the hold's count before the release, and how many it gives up
	left     bool // the caller left: late releases the hold's lock
}

type pendingKey struct{}

func (p *pending) late(r reply) {
	h := p.h
	defer h.Mu.Unlock()
	n, err := r.Int64()
	switch {
	case err != nil:
		// Its outcome is unknown; the next script through the hold
		// sets the count again.
	case n == 0:
		p.c.lose(h, true)
	case n == 1:
		h.Count = p.count - p.n
		p.c.wd.Extend(h, r.Sent)
	}
}
