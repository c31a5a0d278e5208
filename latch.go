package redisync

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/lua"
)

// latchRecheck bounds each wait of CountDownLatch.Wait between two looks at
// the count and its round, so a lost message costs at most this long.
const latchRecheck = time.Second

// CountDownLatch lets any number of waiters, in any process, wait until a
// count set once has been counted down to zero (in the style of Redisson's
// RCountDownLatch, with keys of its own).
//
// Each TrySetCount that sets the count begins a round, which ends when the
// count reaches zero or the latch is deleted; a Wait waits for the end of
// the round it found, and returns then even when the latch has been set
// again (a new round) before it looked.
//
// In Redis the count is a string at its name, and the round's identity a
// string at "{tag}:latch-round:<name>" (tag is the name's hash tag, or the
// name); both are removed when the round ends, and a message on
// "redisync_latch__channel:{name}" (":name" when the name contains "{")
// wakes the waiters.
//
// A CountDownLatch is a cheap handle, safe for concurrent use. It has no
// owner: anyone may count it down. It takes no options. A call whose ctx
// has already ended sends nothing and returns an error wrapping ctx's.
//
// When Redis loses its data (a restart without persistence, a failover to
// a replica that did not have it yet), the count is lost, and a latch that
// was never set or reached zero looks the same: Wait returns at once, as
// if the count had reached zero, and CountDown does nothing. The round is
// lost with it: its waiters return at their next look (within a second),
// even when the latch has been set again meanwhile. Where waiters
// must not be released early by a loss, keep the count in a store that
// survives it, or check the work itself after Wait. (docs/guarantees.md,
// "When Redis loses its data", says what each primitive does then.)
type CountDownLatch struct {
	c       *Client
	name    string
	round   string // the round's key
	channel string
	wrapf   func(error) error
	err     error
}

// CountDownLatch returns a handle on the latch name. Bad input (an empty
// name, a name whose round key cannot share its Cluster slot) is reported
// by every method of the handle.
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	l := &CountDownLatch{c: c, name: name, channel: redissonName("redisync_latch__channel", name)}
	layout := []keyType{{name, "string"}}
	if keys.Taggable(name) {
		l.round = keys.Companion(name, "latch-round")
		layout = append(layout, keyType{l.round, "string"})
	}
	l.wrapf = wrapFor(c, "latch", name, layout...)
	switch {
	case c == nil:
		l.err = l.wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
	case checkName(name) != nil:
		l.err = l.wrap(checkName(name))
	case !keys.Taggable(name):
		l.err = l.wrap(fmt.Errorf("%w: latch name %q has a \"}\" outside a hash tag", ErrInvalid, name))
	}
	return l
}

// Name returns the latch's name, which is also its Redis key.
func (l *CountDownLatch) Name() string { return l.name }

// check refuses bad input, a closed Client and an ended ctx: then nothing
// is sent.
func (l *CountDownLatch) check(ctx context.Context) error {
	if l.err != nil {
		return l.err
	}
	if err := usable(ctx, l.c, l.wrapf); err != nil {
		return l.wrap(err)
	}
	return l.wrap(ctx.Err())
}

func (l *CountDownLatch) wrap(err error) error { return wrapOr(l.wrapf, err) }

// TrySetCount starts the latch counting down from n (n > 0), a new round,
// unless it is already counting, reporting whether it did. A latch whose
// round ended may be set again at once: the waiters of the ended round are
// released all the same. A name that holds a value of another type is
// refused (ErrWrongType) and kept.
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	if n <= 0 {
		return false, l.wrap(fmt.Errorf("%w: count %d (must be positive)", ErrInvalid, n))
	}
	ok, err := l.c.tr.Do(ctx, script(lua.LatchSet, l.keys(), n, l.c.holds.NewField()), nil).Int64()
	if err != nil {
		return false, l.wrap(err)
	}
	return ok == 1, nil
}

// keys are the latch's count and round.
func (l *CountDownLatch) keys() []string { return []string{l.name, l.round} }

// CountDown decrements the count; the CountDown that reaches zero ends the
// round: the latch's keys are removed and the round's waiters, in every
// process, are released. Counting down a latch that is not counting does
// nothing.
//
// A CountDown cannot be told from another, so a caller must not count one
// piece of work twice by retrying. What each result means:
//   - nil: it counted once (or found the latch not counting);
//   - an error wrapping ErrInvalid or ErrClosed, or ctx's error when ctx
//     had ended before the call: nothing was sent, it did not count, and
//     may be called again;
//   - any other error (ctx ended while it was on its way, a network error):
//     it may have counted, once, or not; and a go-redis resend after a
//     network error (see redis.Options.MaxRetries) may even have counted
//     it twice. Calling it again may then count the work twice: release the
//     round's waiters before all the work is done or, when this count
//     ended its round, count down the next round.
//
// So give CountDown a context that does not end before Redis answers
// (context.WithoutCancel(ctx) with a timeout of a few seconds), so that
// only a failing network leaves its outcome unknown, and after such an
// error do not retry: report it, and let the waiters check the work itself
// after Wait (or Delete the latch and set it again from the work's own
// record).
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if err := l.c.tr.Do(ctx, script(lua.LatchCountDown, []string{l.name, l.round}, publish, l.channel), nil).Err(); err != nil {
		return l.wrap(err)
	}
	return nil
}

// Delete removes the latch whatever its count, reporting whether it was
// counting, and ends its round: it releases its waiters in every process,
// as reaching zero does. Use it to reset a latch that a crashed run left counting: a latch
// has no expiry. A key of another type is refused and kept.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx); err != nil {
		return false, err
	}
	n, err := l.c.tr.Do(ctx, script(lua.LatchDelete, []string{l.name, l.round}, publish, l.channel), nil).Int64()
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
	v, err := l.c.tr.Do(ctx, call{Keys: []string{l.name}, Args: []any{"get", l.name}}, nil).Text()
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

// Wait blocks until the round it finds ends (the count reaches zero, or
// Delete), returning at once when the latch is not counting, and returns
// an error wrapping ctx's error if ctx ends first, even while Redis does
// not answer. It is woken by the CountDown (or Delete) that ends the round
// and also looks again every second, so a lost message costs a delay,
// never a hang. It returns when its round has ended even if the latch was
// set again before it looked: a waiter never waits on a later round.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	n, round, err := l.read(ctx)
	if err != nil || n == 0 {
		return l.wrap(err)
	}
	return l.wrap(l.c.holds.Await(ctx, l.channel, notify.WakeAll, latchRecheck, func() (bool, time.Duration, error) {
		n, now, err := l.read(ctx)
		return n == 0 || now != round, latchRecheck, err
	}))
}

// read reads the count and the round's identity together ("" for a count
// set without one), abandoned when ctx ends.
func (l *CountDownLatch) read(ctx context.Context) (int64, string, error) {
	v, err := l.c.tr.Do(ctx, script(lua.LatchRead, l.keys()), nil).Slice()
	if err != nil {
		return 0, "", err
	}
	if len(v) != 2 {
		return 0, "", fmt.Errorf("latch read: %d values, want 2", len(v))
	}
	c, _ := v[0].(string)
	round, _ := v[1].(string)
	if v[0] == nil {
		return 0, round, nil
	}
	n, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("value %q is not a count", c)
	}
	return max(n, 0), round, nil
}
