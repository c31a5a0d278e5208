package redisync

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseTimeout bounds a release whose caller's context is already done.
const releaseTimeout = 5 * time.Second

// detach returns a context for a release: it keeps ctx's values, ignores its
// cancellation and gives up after releaseTimeout.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
}

// cleanupGrace bounds how long a wait that ended waits for its traces in
// Redis (a queue entry) to be removed.
const cleanupGrace = 200 * time.Millisecond

// cleanup runs f, which removes what an ended wait left in Redis, with a
// detached context, and waits for it at most cleanupGrace: with Redis slow or
// unreachable, the wait still ends soon after its context, and f finishes in
// the background, bounded by go-redis's own timeouts.
func cleanup(ctx context.Context, f func(context.Context)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		dctx, cancel := detach(ctx)
		defer cancel()
		f(dctx)
	}()
	t := time.NewTimer(cleanupGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// attempt is one try at acquiring: done reports success; otherwise next is
// how long to wait at most before the next try (the holder's remaining lease).
type attempt func() (done bool, next time.Duration, err error)

// await subscribes to channel and retries try until it succeeds, waiting
// between tries for a wake-up on the channel or for the bound try returned,
// whichever comes first: a lost message costs at most that bound. first is
// the bound returned by the try the caller made before calling await.
//
// The subscription is confirmed before the first retry, so a release that
// happens between the caller's try and the subscription is not missed. It
// returns ctx's error when ctx ends and ErrClosed when the client closes.
func (c *Client) await(ctx context.Context, channel string, wake func(string) int, first time.Duration, try attempt) error {
	return c.awaitFrom(ctx, mark{}, channel, wake, first, try, false, nil)
}

// awaitShared is await for waiters that may need different amounts of one
// resource (a semaphore's permits): a waiter that is woken but cannot use
// what came free passes its wake-up to the next waiter behind it, which may
// need less, instead of leaving it idle until the next bound.
func (c *Client) awaitShared(ctx context.Context, channel string, wake func(string) int, first time.Duration, try attempt) error {
	return c.awaitFrom(ctx, mark{}, channel, wake, first, try, true, nil)
}

// awaitFrom is await for a caller that took m (c.ps.mark(channel)) before its
// own try, or instead of it: when the channel was live then and nothing was
// delivered on it since, the retry before the first wait is skipped, saving
// a round trip per wait under contention. With acc, the waiter can be
// handed the lock by a local releaser while it waits (cohort.go): then
// acc.take stands for the next try.
func (c *Client) awaitFrom(ctx context.Context, m mark, channel string, wake func(string) int, first time.Duration, try attempt, passOn bool, acc *acceptor) error {
	w, err := c.ps.subscribe(channel, wake, acc)
	if err != nil {
		return err
	}
	defer func() {
		if h := w.leave(); h != nil {
			c.giveBackHandoff(h)
		}
	}()
	w.note(first)
	if w.missed(m) {
		if err := w.ready(ctx, first); err != nil {
			return err
		}
	} else if _, err := w.waitIdle(ctx, first); err != nil {
		return err
	}
	woken := false
	for {
		var done bool
		var next time.Duration
		if h := w.setIdle(false); h != nil {
			if h, err = w.handed(ctx); err != nil {
				return err
			}
			done, next, err = acc.take(h)
		} else if y, ok := w.yielding(); ok {
			// This client holds back for another client's waiter
			// (cohort.go), whatever made w look again: a wake-up it may
			// have missed, its wait's bound.
			if _, err := w.waitIdle(ctx, time.Until(y)); err != nil {
				return err
			}
			continue
		} else {
			done, next, err = try()
		}
		if err != nil || done {
			return err
		}
		w.note(next)
		if woken && passOn {
			w.passOn()
		}
		if woken, err = w.waitIdle(ctx, next); err != nil {
			return err
		}
	}
}

// bound turns a PTTL reply into the longest wait before the next try: the
// remaining lease, a millisecond when the key is gone, and fallback when the
// key has no expiry (it was not written by redisync or Redisson).
func bound(pttl int64, fallback time.Duration) time.Duration {
	switch {
	case pttl == -1:
		return fallback
	case pttl <= 0:
		return time.Millisecond
	default:
		return time.Duration(pttl) * time.Millisecond
	}
}

// abandonable runs send, a script that may take what it acquires, so that
// its caller stops waiting for it when ctx ends: go-redis does not honour a
// command's context unless the user enabled ContextTimeoutEnabled, and a
// silent Redis would hold the call for go-redis's own timeouts. It returns
// send's result, and then calls taken (nil: nothing) with it; or it returns
// ctx's error, and undo is called with send's result once that comes, to
// give back whatever the script took or left. With a context that never
// ends, send runs in the caller's goroutine.
func abandonable[T any](ctx context.Context, send func() (T, error), taken, undo func(T, error)) (T, error) {
	if taken == nil {
		taken = func(T, error) {}
	}
	if ctx.Done() == nil {
		v, err := send()
		taken(v, err)
		return v, err
	}
	type result struct {
		v   T
		err error
	}
	got := make(chan result)
	gone := make(chan struct{})
	go func() {
		v, err := send()
		select {
		case got <- result{v, err}:
			taken(v, err)
		case <-gone:
			undo(v, err)
		}
	}()
	select {
	case r := <-got:
		return r.v, r.err
	case <-ctx.Done():
		close(gone)
		var zero T
		return zero, ctx.Err()
	}
}

// retryAfter is how long a wait pauses after an attempt that failed on the
// network before trying again.
const retryAfter = 200 * time.Millisecond

// unsure handles the error of a first acquisition's script under a fresh
// field. Unless Redis refused the script, it may still run there after its
// caller gave up (its reply was lost, or the call was abandoned): *dirty is
// set so the field is swept when the call fails (see sweep). While
// waiting, a network error is retried: the next attempt, under the same
// field, adopts whatever the late one took.
func (c *Client) unsure(err error, wait bool, dirty *bool) (time.Duration, error) {
	var re redis.Error
	if errors.As(err, &re) || errors.Is(err, redis.ErrClosed) {
		return 0, err // refused: nothing taken
	}
	*dirty = true
	if !wait || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, err
	}
	c.log.Warn("redisync: an attempt failed on the network; retrying", "error", err)
	return retryAfter, nil
}

// sweep gives back, now and then every third of lease until a lease has
// passed, what a failed call's attempts may have taken under their field:
// a script whose reply was lost can run in Redis later than its caller's
// give-back.
func (c *Client) sweep(lease time.Duration, calls ...call) {
	if !c.bgStart() {
		c.undo(calls...) // closing: once, now, as Close releases holds
		return
	}
	go func() {
		defer c.bg.Done()
		for i := range 4 {
			if i > 0 {
				select {
				case <-time.After(lease / 3):
				case <-c.closed:
					return
				}
			}
			c.undo(calls...)
		}
	}()
}
