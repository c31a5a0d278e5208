package redisync

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync-go/redisync/lua"
)

// latchRecheck bounds each wait of CountDownLatch.Wait between two looks at
// the count, so a lost message costs at most this long.
const latchRecheck = time.Second

// CountDownLatch lets any number of waiters, in any process, wait until a
// count set once has been counted down to zero (Redisson's
// RCountDownLatch). In Redis it is a string at its name holding the count;
// the key is removed at zero and a message on
// "redisync_latch__channel:{name}" (":name" when the name contains "{")
// wakes the waiters.
//
// A CountDownLatch is a cheap handle, safe for concurrent use. It has no
// owner: anyone may count it down. It takes no options.
//
// When Redis loses its data (a restart without persistence, a failover to
// a replica that did not have it yet), the count is lost, and a latch that
// was never set or reached zero looks the same: Wait returns at once, as
// if the count had reached zero, and CountDown does nothing. Where waiters
// must not be released early by a loss, keep the count in a store that
// survives it, or check the work itself after Wait. (The README's "When
// Redis loses its data" says what each primitive does then.)
type CountDownLatch struct {
	c       *Client
	name    string
	channel string
	wrapf   func(error) error
	err     error
}

// CountDownLatch returns a handle on the latch name. An empty name is
// reported by every method of the handle.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	l := &CountDownLatch{c: c, name: name, channel: redissonName("redisync_latch__channel", name)}
	l.wrapf = wrapFor(c, "latch", name, keyType{name, "string"})
	switch {
	case c == nil:
		l.err = l.wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
	default:
		l.err = l.wrap(checkName(name))
	}
	return l
}

// Name returns the latch's name, which is also its Redis key.
func (l *CountDownLatch) Name() string { return l.name }

func (l *CountDownLatch) check(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	return l.wrap(usable(ctx, l.c, l.wrapf))
}

func (l *CountDownLatch) wrap(err error) error { return wrapOr(l.wrapf, err) }

// TrySetCount starts the latch counting down from n (n > 0) unless it is
// already counting, reporting whether it did. A latch that reached zero may
// be set again.
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if n <= 0 {
		return false, l.wrap(fmt.Errorf("%w: count %d (must be positive)", ErrInvalid, n))
	}
	ok, err := l.c.rdb.SetNX(ctx, l.name, n, 0).Result()
	if err != nil {
		return false, l.wrap(err)
	}
	return ok, nil
}

// CountDown decrements the count; at zero the latch's key is removed and
// every waiter, in every process, is released. Counting down a latch that
// is not counting does nothing.
//
// A CountDown that go-redis resends after a network error may count twice.
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := l.c.tr.do(ctx, script(lua.LatchCountDown, []string{l.name}, publish, l.channel), nil).Err(); err != nil {
		return l.wrap(err)
	}
	return nil
}

// Delete removes the latch whatever its count, reporting whether it was
// counting, and releases its waiters in every process, as reaching zero
// does. Use it to reset a latch that a crashed run left counting: a latch
// has no expiry. A key of another type is refused and kept.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	n, err := l.c.tr.do(ctx, script(lua.LatchDelete, []string{l.name}, publish, l.channel), nil).Int64()
	if err != nil {
		return false, l.wrap(err)
	}
	return n == 1, nil
}

// Count returns the count left: 0 when the latch reached zero or was never
// set.
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx); err != nil {
		return 0, err
	}
	return l.count(ctx)
}

// count reads the count, abandoned when ctx ends, even while Redis does
// not answer.
func (l *CountDownLatch) count(ctx context.Context) (int64, error) {
	v, err := l.c.tr.do(ctx, call{keys: []string{l.name}, args: []any{"get", l.name}}, nil).Text()
	if err != nil {
		if isNil(err) {
			return 0, nil
		}
		return 0, l.wrap(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, l.wrap(fmt.Errorf("value %q is not a count", v))
	}
	return max(n, 0), nil
}

// Wait blocks until the count is zero, returning at once when it is zero or
// the latch was never set, and returns an error wrapping ctx's error if ctx
// ends first, even while Redis does not answer. It is
// woken by the CountDown that reaches zero and also looks again every
// second, so a lost message costs a delay, never a hang.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return l.wrap(err)
	}
	count := func() (int64, error) { return l.count(ctx) }
	n, err := count()
	if err != nil || n == 0 {
		return l.wrap(err)
	}
	return l.wrap(l.c.await(ctx, l.channel, wakeAll, latchRecheck, func() (bool, time.Duration, error) {
		n, err := count()
		return n == 0, latchRecheck, err
	}))
}
