package redisync

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// errNilFunc refuses a nil function given to a Do.
var errNilFunc = fmt.Errorf("%w: nil function", ErrInvalid)

// do is the one-call form of every lock: it acquires with acquire, runs fn
// with the hold's context, and releases that hold with release, even when
// fn panics (the panic then goes on, after the release) or exits its
// goroutine. An acquisition that fails returns its error and fn is not
// called; a nil fn is refused (an error made by wrap, naming the lock).
// Otherwise the result is fn's error joined with the release's
// (errors.Join); either alone is returned as it is.
func do(ctx context.Context, wrap func(error) error, acquire func(context.Context) (context.Context, error), release func(context.Context) error, fn func(context.Context) error) (err error) {
	if fn == nil {
		return wrap(errNilFunc)
	}
	hctx, err := acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if rerr := release(hctx); rerr != nil {
			err = joinErr(err, rerr)
		}
	}()
	return fn(hctx)
}

// joinErr is errors.Join for two errors, the second non-nil: the second
// alone when the first is nil, so that a caller comparing with == sees it.
func joinErr(err, rerr error) error {
	if err == nil {
		return rerr
	}
	return errors.Join(err, rerr)
}

// bounded returns an acquire function for do that waits at most wait,
// through tryFor (a TryLockFor).
func bounded(wait time.Duration, tryFor func(context.Context, time.Duration) (context.Context, error)) func(context.Context) (context.Context, error) {
	return func(ctx context.Context) (context.Context, error) { return tryFor(ctx, wait) }
}

// Do runs fn under the lock with the hold's context, waiting as Lock does,
// and unlocks it when fn returns or panics (a panic goes on after the
// Unlock). It returns Lock's error without calling fn when the lock was not
// acquired, otherwise fn's error joined with Unlock's, which wraps
// ErrLeaseLost when the lock was lost before fn's end.
func (m *Mutex) Do(ctx context.Context, fn func(lctx context.Context) error) error {
	return do(ctx, m.wrap, m.Lock, m.Unlock, fn)
}

// DoFor is Do waiting at most wait for the lock, as TryLockFor does (an
// error wrapping ErrNotAcquired after it, and fn is not called). The bound
// is on the wait only: fn runs under a hold that lasts as long as ctx.
func (m *Mutex) DoFor(ctx context.Context, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, m.wrap, bounded(wait, m.TryLockFor), m.Unlock, fn)
}

// Do runs fn under the lock, granted in arrival order, with the hold's
// context, and unlocks it when fn returns or panics. Its results are
// Mutex.Do's: Lock's error without calling fn, or fn's joined with Unlock's.
func (f *FairMutex) Do(ctx context.Context, fn func(lctx context.Context) error) error {
	return do(ctx, f.wrap, f.Lock, f.Unlock, fn)
}

// DoFor is Do waiting at most wait for the lock, as TryLockFor does. The
// bound is on the wait only: fn runs under a hold that lasts as long as ctx.
func (f *FairMutex) DoFor(ctx context.Context, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, f.wrap, bounded(wait, f.TryLockFor), f.Unlock, fn)
}

// Do runs fn under the write lock with the hold's context, and unlocks it
// when fn returns or panics. Its results are Mutex.Do's: Lock's error
// without calling fn, or fn's joined with Unlock's.
func (r *RWMutex) Do(ctx context.Context, fn func(lctx context.Context) error) error {
	return do(ctx, r.wrap, r.Lock, r.Unlock, fn)
}

// DoFor is Do waiting at most wait for the write lock, as TryLockFor does.
// The bound is on the wait only: fn runs under a hold that lasts as long as
// ctx.
func (r *RWMutex) DoFor(ctx context.Context, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, r.wrap, bounded(wait, r.TryLockFor), r.Unlock, fn)
}

// RDo runs fn under the read lock with the hold's context, and read-unlocks
// it when fn returns or panics. Its results are Mutex.Do's: RLock's error
// without calling fn, or fn's joined with RUnlock's.
func (r *RWMutex) RDo(ctx context.Context, fn func(lctx context.Context) error) error {
	return do(ctx, r.wrap, r.RLock, r.RUnlock, fn)
}

// RDoFor is RDo waiting at most wait for the read lock, as TryRLockFor
// does. The bound is on the wait only: fn runs under a hold that lasts as
// long as ctx.
func (r *RWMutex) RDoFor(ctx context.Context, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, r.wrap, bounded(wait, r.TryRLockFor), r.RUnlock, fn)
}

// Do runs fn holding n permits, acquired as Acquire does, with the hold's
// context, and releases the n permits when fn returns or panics. Its results
// are Mutex.Do's: Acquire's error without calling fn, or fn's joined with
// Release's (ErrLeaseLost: the permits were lost before fn's end).
func (s *Semaphore) Do(ctx context.Context, n int, fn func(lctx context.Context) error) error {
	return do(ctx, s.wrap, func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, n) },
		func(ctx context.Context) error { return s.Release(ctx, n) }, fn)
}

// DoFor is Do waiting at most wait for the n permits, as TryAcquireFor
// does. The bound is on the wait only: fn runs under a hold that lasts as
// long as ctx.
func (s *Semaphore) DoFor(ctx context.Context, n int, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, s.wrap, func(ctx context.Context) (context.Context, error) { return s.TryAcquireFor(ctx, n, wait) },
		func(ctx context.Context) error { return s.Release(ctx, n) }, fn)
}

// Do runs fn holding every name, with the hold's context, and unlocks them
// when fn returns or panics. Its results are Mutex.Do's: Lock's error
// without calling fn, or fn's joined with Unlock's (ErrLeaseLost: a name
// was lost before fn's end).
func (m *MultiLock) Do(ctx context.Context, fn func(lctx context.Context) error) error {
	return do(ctx, m.wrap, m.Lock, m.Unlock, fn)
}

// DoFor is Do waiting at most wait for all the names, as TryLockFor does.
// The bound is on the wait only: fn runs under a hold that lasts as long as
// ctx.
func (m *MultiLock) DoFor(ctx context.Context, wait time.Duration, fn func(lctx context.Context) error) error {
	return do(ctx, m.wrap, bounded(wait, m.TryLockFor), m.Unlock, fn)
}
