// Package traps has each trap the analyzer reports, once per lock kind.
package traps

import (
	"context"
	"time"

	"github.com/redisync-go/redisync"
)

// The parent context given to the release: redislock's defer lock.Release(ctx).
func parentToUnlock(ctx context.Context, c *redisync.Client) error {
	m := c.Mutex("orders:42")
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer m.Unlock(ctx) // want `m.Unlock is given ctx, which is not the hold's context: .* give it lctx`
	return work(lctx)
}

func parentToEveryRelease(ctx context.Context, c *redisync.Client) {
	f := c.FairMutex("f")
	fctx, _ := f.TryLockFor(ctx, time.Second)
	_ = f.Unlock(ctx) // want `f.Unlock is given ctx, which is not the hold's context`
	_ = work(fctx)

	rw := c.RWMutex("rw")
	wctx, _ := rw.Lock(ctx)
	_ = rw.Unlock(ctx) // want `rw.Unlock is given ctx, which is not the hold's context`
	rctx, _ := rw.RLock(ctx)
	_ = rw.RUnlock(ctx) // want `rw.RUnlock is given ctx, which is not the hold's context`
	_ = work(wctx)
	_ = work(rctx)

	s := c.Semaphore("s")
	sctx, _ := s.Acquire(ctx, 2)
	_ = s.Release(ctx, 2) // want `s.Release is given ctx, which is not the hold's context`
	_ = work(sctx)

	ml := c.MultiLock([]string{"a", "b"})
	mctx, _ := ml.TryLock(ctx)
	_ = ml.Unlock(ctx) // want `ml.Unlock is given ctx, which is not the hold's context`
	_ = work(mctx)

	e := c.Election("leader")
	ectx, _ := e.Campaign(ctx, "me")
	_ = e.Resign(ctx) // want `e.Resign is given ctx, which is not the hold's context`
	_ = work(ectx)
}

// Another lock's hold: re-entry is per lock.
func otherLocksHold(ctx context.Context, c *redisync.Client) {
	a, b := c.Mutex("a"), c.Mutex("b")
	actx, _ := a.Lock(ctx)
	bctx, _ := b.Lock(ctx)
	_ = b.Unlock(actx) // want `b.Unlock is given actx, which is not the hold's context: .* give it bctx`
	_ = a.Unlock(actx)
	_ = work(bctx)
}

// A downgrade's read hold is in the context RLock returns, not in the
// write hold's it was taken with.
func downgradeReleasedWithWriteHold(ctx context.Context, rw *redisync.RWMutex) {
	wctx, _ := rw.Lock(ctx)
	rctx, _ := rw.RLock(wctx)
	_ = rw.Unlock(wctx)
	_ = rw.RUnlock(wctx) // want `rw.RUnlock is given wctx, which is not the hold's context: .* give it rctx`
	_ = work(rctx)
}

// A context that carries no hold, even where the lock is not taken.
func background(m *redisync.Mutex) error {
	return m.Unlock(context.Background()) // want `m.Unlock is given context.Background\(\), which carries no hold`
}

func todo(s *redisync.Semaphore) error {
	return s.Release(context.TODO(), 1) // want `s.Release is given context.TODO\(\), which carries no hold`
}

// The hold's context discarded.
func discarded(ctx context.Context, c *redisync.Client) error {
	m := c.Mutex("x")
	if _, err := m.Lock(ctx); err != nil { // want `the hold's context that m.Lock returns is discarded: .* Unlock with another context returns ErrNotHeld`
		return err
	}
	defer m.Unlock(ctx) // want `m.Unlock is given ctx, which is not the hold's context: .* give it the context the lock's acquisition returned`

	rw := c.RWMutex("rw")
	rw.TryRLock(ctx)                    // want `the hold's context that rw.TryRLock returns is discarded: .* RUnlock with another context`
	go c.Semaphore("s").Acquire(ctx, 1) // want `the hold's context that c.Semaphore\("s"\).Acquire returns is discarded: .* Release with another context`
	var e *redisync.Election
	_, _ = e.TryCampaignFor(ctx, "me", time.Second) // want `the hold's context that e.TryCampaignFor returns is discarded: .* Resign with another`
	var held, err = c.FairMutex("f").Lock(ctx)
	_, _ = held, err
	return nil
}

// A field is the same lock in every method.
type service struct {
	mu   *redisync.Mutex
	hold context.Context
}

func (s *service) restart(ctx context.Context) error {
	var err error
	s.hold, err = s.mu.Lock(ctx)
	if err != nil {
		return err
	}
	return s.mu.Unlock(ctx) // want `s.mu.Unlock is given ctx, which is not the hold's context: .* give it s.hold`
}

func work(ctx context.Context) error { return ctx.Err() }
