// Package clean releases every hold with its own context, in the ways
// redisync allows: the analyzer reports nothing here.
package clean

import (
	"context"
	"errors"
	"time"

	"github.com/redisync-go/redisync"
)

func plain(ctx context.Context, m *redisync.Mutex) error {
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	defer m.Unlock(lctx)
	return work(lctx)
}

// The parent's variable takes the hold's context.
func reassigned(ctx context.Context, m *redisync.Mutex) (err error) {
	ctx, err = m.TryLockFor(ctx, time.Second)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Unlock(ctx)) }()
	return work(ctx)
}

// A re-entry, and contexts derived from the hold's.
func derived(ctx context.Context, m *redisync.Mutex) error {
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	inner, err := m.Lock(lctx)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(inner, time.Second)
	defer cancel()
	if err := m.Unlock(tctx); err != nil {
		return err
	}
	return m.Unlock(context.WithoutCancel(lctx))
}

// Copied, captured by a closure, handed to one.
func closures(ctx context.Context, c *redisync.Client) {
	rw := c.RWMutex("rw")
	wctx, _ := rw.Lock(ctx)
	hold := wctx
	defer func() { _ = rw.Unlock(hold) }()
	rctx, _ := rw.RLock(wctx) // a downgrade
	go func(h context.Context) { _ = rw.RUnlock(h) }(rctx)
}

// Nested holds of two locks: a hold's context carries the holds of the
// context it was taken with.
func nested(ctx context.Context, c *redisync.Client) {
	a, b := c.Mutex("a"), c.Mutex("b")
	actx, _ := a.Lock(ctx)
	bctx, _ := b.Lock(actx)
	_ = b.Unlock(bctx)
	_ = a.Unlock(bctx)
}

func semaphoreAndElection(ctx context.Context, c *redisync.Client) error {
	s := c.Semaphore("jobs")
	sctx, err := s.TryAcquireFor(ctx, 2, time.Second)
	if err != nil {
		return err
	}
	defer s.Release(sctx, 2)
	e := c.Election("leader")
	ectx, err := e.Campaign(ctx, "me")
	if err != nil {
		return err
	}
	return e.Resign(ectx)
}

// A struct field, set in one method, released in another.
type service struct {
	mu   *redisync.Mutex
	hold context.Context
}

func (s *service) start(ctx context.Context) (err error) {
	s.hold, err = s.mu.Lock(ctx)
	return err
}

func (s *service) stop() error { return s.mu.Unlock(s.hold) }

func fromLiteral(ctx context.Context, m *redisync.Mutex) error {
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	st := service{mu: m, hold: lctx}
	return m.Unlock(st.hold)
}

// A helper handed the hold's context: not its to check.
func release(hold context.Context, m *redisync.Mutex) error { return m.Unlock(hold) }

// The one-call form, and the hold's context returned to the caller.
func do(ctx context.Context, m *redisync.Mutex) error {
	return m.Do(ctx, func(lctx context.Context) error { return work(lctx) })
}

func returned(ctx context.Context, m *redisync.Mutex) (context.Context, error) {
	return m.Lock(ctx)
}

// A context the analyzer cannot follow is not reported.
func unknown(ctx context.Context, m *redisync.Mutex, holds map[string]context.Context) error {
	_, _ = m.HoldCount(ctx)
	lctx, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	holds["x"] = lctx
	return m.Unlock(holds["x"])
}

// A release in a closure outside any function.
var stop = func(m *redisync.Mutex, lctx context.Context) error { return m.Unlock(lctx) }

func work(ctx context.Context) error { return ctx.Err() }
