package redisync

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the one-call form (do.go), for every primitive through apiOps
// (Do and DoFor; RDo and RDoFor for the read side), against miniredis and a
// real redis-server.

// doWait is the wait bound of DoFor in the tests that expect it to acquire
// a free lock: a round trip fits in it even on a loaded machine.
const doWait = 500 * time.Millisecond

// Do and DoFor run fn under a hold of the lock, with the hold's context,
// and release it when fn returns: fn's error comes back as it is. DoFor's
// bound is on the wait only: fn runs past it under a live hold.
func TestDoRunsUnderTheHold(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c := e.client(t)
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		before := redisState(t, e)
		errWork := errors.New("the work failed")

		for _, form := range []struct {
			name string
			do   func(fn func(context.Context) error) error
		}{
			{"Do", func(fn func(context.Context) error) error { return mine.do(bg, fn) }},
			{"DoFor", func(fn func(context.Context) error) error { return mine.doFor(bg, doWait, fn) }},
		} {
			var lctx context.Context
			err := form.do(func(ctx context.Context) error {
				lctx = ctx
				assert.True(t, mine.busy(), "%s: held while fn runs", form.name)
				assert.Equal(t, 1, mine.count(ctx), "%s: fn's context carries the hold", form.name)
				if form.name == "DoFor" {
					time.Sleep(doWait + 100*time.Millisecond) // past the wait bound
				}
				assert.NoError(t, ctx.Err(), "%s: the hold is live until fn returns", form.name)
				return errWork
			})
			assert.Same(t, errWork, err, "%s: fn's error, as it is", form.name)
			require.NotNil(t, lctx, form.name)
			assert.Error(t, lctx.Err(), "%s: the hold ended with Do", form.name)
			assert.False(t, mine.busy(), "%s: released", form.name)
			assert.Equal(t, before, redisState(t, e), "%s: nothing left behind", form.name)

			assert.NoError(t, form.do(func(context.Context) error { return nil }), form.name)
		}
	})
}

// An acquisition that fails returns its error and does not call fn: held
// elsewhere (DoFor's bound ends, Do's context ends), a nil fn, a bad wait.
func TestDoNotAcquiredDoesNotCallFn(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c, other := e.client(t), e.client(t)
		k.setup(t, c, name)
		mine, rival := k.mine(t, c, name), k.rival(t, other, name)
		called := func(context.Context) error { t.Error("fn called without the lock"); return nil }

		rctx, err := rival.lock(bg)
		require.NoError(t, err)
		err = mine.doFor(bg, 30*time.Millisecond, called)
		assert.ErrorIs(t, err, ErrNotAcquired)
		short, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		err = mine.do(short, called)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, rival.unlock(rctx))

		assert.ErrorIs(t, mine.doFor(bg, 0, called), ErrInvalid, "a wait that is not positive")
		err = mine.do(bg, nil)
		assert.ErrorIs(t, err, ErrInvalid, "a nil fn")
		assert.ErrorContains(t, err, "nil function")
		assert.ErrorIs(t, mine.doFor(bg, doWait, nil), ErrInvalid, "a nil fn")
		// a grant whose reply came after a wait ended is given back in the background
		eventually(t, 2*time.Second, "nothing taken", func() bool { return !mine.busy() })
	})
}

// A panic in fn releases the hold before it goes on to Do's caller, with
// its value unchanged.
func TestDoPanicReleasesThenPanics(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c := e.client(t)
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		type boom struct{ n int }
		for _, do := range []func(fn func(context.Context) error) error{
			func(fn func(context.Context) error) error { return mine.do(bg, fn) },
			func(fn func(context.Context) error) error { return mine.doFor(bg, doWait, fn) },
		} {
			var lctx context.Context
			func() {
				defer func() {
					p := recover()
					assert.Equal(t, boom{7}, p, "the panic goes on, its value unchanged")
					require.NotNil(t, lctx)
					assert.Error(t, lctx.Err(), "the hold ended before the panic reached the caller")
					assert.False(t, mine.busy(), "released before the panic reached the caller")
				}()
				_ = do(func(ctx context.Context) error {
					lctx = ctx
					require.True(t, mine.busy())
					panic(boom{7})
				})
				t.Error("Do returned after a panic in fn")
			}()
		}
	})
}

// The release's error joins fn's: a hold lost under fn (Redis lost its
// data) makes Do return both, the loss as ErrLeaseLost.
func TestDoJoinsTheReleaseError(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		c := e.client(t)
		k.setup(t, c, name)
		mine := k.mine(t, c, name)
		errWork := errors.New("the work failed")
		for _, form := range []struct {
			name string
			do   func(fn func(context.Context) error) error
		}{
			{"Do", func(fn func(context.Context) error) error { return mine.do(bg, fn) }},
			{"DoFor", func(fn func(context.Context) error) error { return mine.doFor(bg, doWait, fn) }},
		} {
			lose := func(context.Context) error {
				require.NoError(t, e.rdb(t).FlushAll(bg).Err())
				return errWork
			}
			err := form.do(lose)
			assert.ErrorIs(t, err, errWork, form.name)
			assert.ErrorIs(t, err, ErrLeaseLost, form.name)

			// fn's success and the loss: the release's error alone.
			k.setup(t, c, name)
			err = form.do(func(ctx context.Context) error { _ = lose(ctx); return nil })
			assert.ErrorIs(t, err, ErrLeaseLost, form.name)
			assert.NotErrorIs(t, err, errWork, form.name)
			k.setup(t, c, name)
		}
	})
}

// fn that ends its goroutine (runtime.Goexit, as t.FailNow does) releases
// the hold too.
func TestDoGoexitReleases(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t).Mutex("do:goexit")
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.Do(context.Background(), func(context.Context) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		locked, err := m.IsLocked(context.Background())
		require.NoError(t, err)
		assert.False(t, locked, "released when fn ended its goroutine")
	})
}
