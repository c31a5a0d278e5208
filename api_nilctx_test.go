package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On error, every call that returns a hold's context returns a nil
// context, never the one it was given: a caller that drops the error must
// not hold something that looks exactly like a hold. Each way of failing
// is tried: held elsewhere (TryLock, the bound of TryLockFor, the end of
// Lock's context), Redis silent (a blackholed link), a refused re-entry, a
// closed Client.
func TestAPIErrorsReturnNilContext(t *testing.T) {
	forEachRealKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c, other := e.client(t), e.client(t)
		k.setup(t, c, name)
		mine, rival := k.mine(t, c, name), k.rival(t, other, name)
		rctx, err := rival.lock(bg)
		require.NoError(t, err)
		nilOnError := func(what string, ctx context.Context, err error) {
			t.Helper()
			assert.Error(t, err, what)
			assert.Nil(t, ctx, "%s: the context on error (%v)", what, err)
		}

		ctx, err := mine.try(bg)
		nilOnError("try, held elsewhere", ctx, err)
		ctx, err = mine.tryFor(bg, 30*time.Millisecond)
		nilOnError("tryFor, held elsewhere", ctx, err)
		short, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		ctx, err = mine.lock(short)
		cancel()
		nilOnError("lock, held elsewhere until its context ends", ctx, err)
		ctx, err = mine.tryFor(bg, 0)
		nilOnError("tryFor, a wait that is not positive", ctx, err)
		require.NoError(t, rival.unlock(rctx))

		// Redis silent: the wait ends with the call's context.
		p := newProxy(t, e.addr)
		silent := newClient(t, newRDB(t, p.Addr()))
		k.setup(t, silent, name)
		sm := k.mine(t, silent, name)
		p.Blackhole(true)
		short, cancel = context.WithTimeout(bg, 200*time.Millisecond)
		ctx, err = sm.lock(short)
		cancel()
		nilOnError("lock, Redis silent", ctx, err)
		healProxy(p)

		require.NoError(t, c.Close())
		ctx, err = mine.lock(bg)
		nilOnError("lock, Client closed", ctx, err)
		assert.True(t, errors.Is(err, ErrClosed), "%v", err)
	})
}

// The same for the calls that only some primitives have: a refused
// re-entry (another lease), a refused upgrade, a refused second campaign,
// and a campaign whose context ends while another candidate leads.
func TestAPIErrorsReturnNilContextOthers(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	c, other := e.client(t), e.client(t)
	nilOnError := func(what string, ctx context.Context, err error) {
		t.Helper()
		assert.Error(t, err, what)
		assert.Nil(t, ctx, "%s: the context on error (%v)", what, err)
	}

	lctx, err := c.Mutex("nil:m").Lock(bg)
	require.NoError(t, err)
	ctx, err := c.Mutex("nil:m", WithLease(time.Second)).Lock(lctx)
	nilOnError("a re-entry with another lease", ctx, err)
	assert.ErrorIs(t, err, ErrInvalid)

	rctx, err := c.RWMutex("nil:rw").RLock(bg)
	require.NoError(t, err)
	ctx, err = c.RWMutex("nil:rw").Lock(rctx)
	nilOnError("an upgrade", ctx, err)
	ctx, err = c.Semaphore("nil:s").Acquire(bg, 0)
	nilOnError("no permits", ctx, err)

	el := c.Election("nil:e")
	ectx, err := el.Campaign(bg, "a")
	require.NoError(t, err)
	ctx, err = el.Campaign(ectx, "again")
	nilOnError("a second campaign through a leadership", ctx, err)
	short, cancel := context.WithTimeout(bg, 30*time.Millisecond)
	ctx, err = other.Election("nil:e").Campaign(short, "b")
	cancel()
	nilOnError("a campaign while another leads", ctx, err)
	ctx, err = c.Election("").Campaign(bg, "x")
	nilOnError("a bad name", ctx, err)
}
