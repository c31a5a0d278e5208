package holds

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/internal/transport"
)

// ReleaseTimeout bounds a release whose caller's context is already done.
const ReleaseTimeout = 5 * time.Second

// detach returns a context for a release: it keeps ctx's values and
// ignores its cancellation. A release is bounded by ReleaseTimeout
// instead (see Client.release).
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// cleanup sends calls, which remove what an ended wait left in Redis (a
// queue entry) or give back what it took, without waiting for them: the
// wait ends at its context, even while Redis is slow or does not answer.
// A call that fails on the network (it may not have run) is sent again,
// after RetryAfter and then after pauses doubling up to a second, until
// it is answered or within has passed (how long what it removes can last
// in Redis), or the client closes.
func (m *Machine) Cleanup(within time.Duration, calls ...call) {
	m.cleanupAgain(time.Now().Add(within), RetryAfter, calls...)
}

func (m *Machine) cleanupAgain(until time.Time, pause time.Duration, calls ...call) {
	m.tr.Async(func(k call, r reply) {
		err := r.Err()
		var re redis.Error
		switch {
		case err == nil:
		case errors.As(err, &re) && !errs.NotReady(err) || time.Now().Add(pause).After(until):
			m.log.Warn("redisync: could not remove what a wait left; its lease or deadline frees it",
				"script", scriptName(k), "error", err)
		case m.bgStart(): // it must not block: it runs in a worker
			go func() {
				defer m.bg.Done()
				select {
				case <-time.After(pause):
					m.cleanupAgain(until, min(2*pause, time.Second), k)
				case <-m.closed:
				}
			}()
		}
	}, calls...)
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
// returns ctx's error when ctx ends and errs.Closed when the client closes.
func (m *Machine) Await(ctx context.Context, channel string, wake func(string) int, first time.Duration, try attempt) error {
	return m.AwaitFrom(ctx, notify.Mark{}, channel, wake, first, try, false, nil)
}

// awaitShared is await for waiters that may need different amounts of one
// resource (a semaphore's permits): a waiter that is woken but cannot use
// what came free passes its wake-up to the next waiter behind it, which may
// need less, instead of leaving it idle until the next bound.
func (m *Machine) AwaitShared(ctx context.Context, channel string, wake func(string) int, first time.Duration, try attempt) error {
	return m.AwaitFrom(ctx, notify.Mark{}, channel, wake, first, try, true, nil)
}

// AwaitFrom is Await for a caller that took mk (Hub.Mark(channel)) before its
// own try, or instead of it: when the channel was live then and nothing was
// delivered on it since, the retry before the first wait is skipped, saving
// a round trip per wait under contention. With acc, the waiter can be
// handed the lock by a local releaser while it waits (internal/cohort): then
// acc.take stands for the next try.
func (m *Machine) AwaitFrom(ctx context.Context, mk notify.Mark, channel string, wake func(string) int, first time.Duration, try attempt, passOn bool, acc *cohort.Acceptor) error {
	w, err := m.ps.Subscribe(channel, wake)
	if err != nil {
		return err
	}
	var e *cohort.Entry // with acc: it may be handed the lock while idle
	if acc != nil {
		e = m.co.Join(channel, acc, w.WakeNow, w.Woken())
	}
	defer func() {
		if e != nil {
			if h := m.co.Leave(e); h != nil {
				m.GiveBackHandoff(h)
			}
		}
		w.Leave()
	}()
	// waitIdle waits, and meanwhile the waiter may be handed the lock.
	waitIdle := func(d time.Duration) (bool, error) {
		if e != nil {
			m.co.SetIdle(e, true)
		}
		return w.Wait(ctx, d)
	}
	w.Note(first)
	if w.Missed(mk) {
		if err := w.Ready(ctx, first); err != nil {
			return err
		}
	} else if _, err := waitIdle(first); err != nil {
		return err
	}
	woken := false
	for {
		var done bool
		var next time.Duration
		var h *cohort.Handoff
		if e != nil {
			h = m.co.SetIdle(e, false)
		}
		if h != nil {
			if h, err = m.co.Handed(ctx, e, m.closed); err != nil {
				return err
			}
			done, next, err = acc.Take(h)
		} else if y, ok := m.co.Yielding(acc, time.Now()); ok {
			// This client holds back for another client's waiter
			// (internal/cohort), whatever made w look again: a wake-up it may
			// have missed, its wait's bound.
			if _, err := waitIdle(time.Until(y)); err != nil {
				return err
			}
			continue
		} else {
			done, next, err = try()
		}
		if err != nil || done {
			return err
		}
		w.Note(next)
		if woken && passOn {
			w.PassOn()
		}
		if woken, err = waitIdle(next); err != nil {
			return err
		}
	}
}

// RetryAfter is how long a wait pauses after an attempt that failed on the
// network before trying again.
const RetryAfter = 200 * time.Millisecond

// unsure handles the error of a first acquisition's script under a fresh
// field. Unless Redis refused the script, it may still run there after its
// caller gave up (its reply was lost, or the call was abandoned): *dirty is
// set so the field is swept when the call fails (see sweep). While
// waiting, a network error is retried: the next attempt, under the same
// field, adopts whatever the late one took.
func (m *Machine) unsure(err error, wait bool, dirty *bool) (time.Duration, error) {
	var re redis.Error
	if errors.As(err, &re) && wait && errs.NotReady(err) {
		// Redis is loading its data, busy, or its cluster is settling:
		// nothing ran, and a wait rides it out.
		m.log.Warn("redisync: Redis is not ready; retrying", "error", err)
		return RetryAfter, nil
	}
	if wait && errors.Is(err, transport.ErrNotSent) && !errors.As(err, &re) && !errors.Is(err, redis.ErrClosed) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrClosed) {
		// Not sent for want of a connection (Redis refuses them, the
		// primary is down): nothing taken, and a wait rides it out.
		m.log.Warn("redisync: Redis could not be reached; retrying", "error", err)
		return RetryAfter, nil
	}
	if errors.As(err, &re) || errors.Is(err, redis.ErrClosed) || errors.Is(err, transport.ErrNotSent) {
		return 0, err // refused, or not sent: nothing taken
	}
	*dirty = true
	if !wait || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, err
	}
	m.log.Warn("redisync: an attempt failed on the network; retrying", "error", err)
	return RetryAfter, nil
}

// Sweep gives back, now and then every third of lease until a lease has
// passed, what a failed call's attempts may have taken under their field:
// a script whose reply was lost can run in Redis later than its caller's
// give-back. Each round is an Undo, kept when it reaches no server until
// a lease from that round has passed.
func (m *Machine) Sweep(lease time.Duration, calls ...call) {
	if !m.bgStart() {
		m.Undo(time.Now(), lease, calls...) // closing: once, now, as Close releases holds
		return
	}
	go func() {
		defer m.bg.Done()
		for i := range 4 {
			if i > 0 {
				select {
				case <-time.After(lease / 3):
				case <-m.closed:
					return
				}
			}
			m.Undo(time.Now(), lease, calls...) // its script ran by now, or a later round gives it back
		}
	}()
}
