package redisync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 43: a release that returns ErrLeaseLost (Redis lost the hold
// before the release: a restart without persistence, a forced unlock, a
// deleted key) is told to the Observer as a lost lease, with its cause,
// never as released; on every primitive, for the last release and for one
// that leaves re-entries (which Redis no longer has either). A release
// that finds its hold is told released, as before.
func TestObserverToldLeaseLostWhenReleaseReturnsIt(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		var l obsLog
		c := e.client(t, WithObserver(l.observer()))
		k.setup(t, c, name)
		mine := k.mine(t, c, name)

		// the control: a release that finds its hold
		hctx, err := mine.lock(marked("kept"))
		require.NoError(t, err)
		require.NoError(t, mine.unlock(hctx))
		evs := l.events()
		require.Len(t, evs, 2)
		assert.Equal(t, "released", evs[1].what)
		assert.Equal(t, OutcomeReleased, evs[1].e.Outcome)

		// the last release of a hold Redis lost
		hctx, err = mine.lock(marked("lost"))
		require.NoError(t, err)
		loseInRedis(t, e, name)
		err = mine.unlock(hctx)
		require.ErrorIs(t, err, ErrLeaseLost)
		evs = l.events()
		require.Len(t, evs, 4, "events: %v", evs)
		assert.Equal(t, "acquired", evs[2].what)
		assert.Equal(t, "lost", evs[3].what, "a release that returned %v was told %q", err, evs[3].what)
		assert.Equal(t, OutcomeLost, evs[3].e.Outcome)
		assert.ErrorIs(t, evs[3].e.Cause, ErrLeaseLost)
		assert.Equal(t, "lost", evs[3].mark, "LeaseLost gets the context the hold was taken with")
		assert.Equal(t, k.event, evs[3].e.Kind)

		// a release that leaves a re-entry, of a hold Redis lost
		k.setup(t, c, name) // a Semaphore's permits, lost with the rest
		hctx, err = mine.lock(marked("reentered"))
		require.NoError(t, err)
		inner, err := mine.lock(hctx)
		require.NoError(t, err)
		loseInRedis(t, e, name)
		err = mine.unlock(inner)
		require.ErrorIs(t, err, ErrLeaseLost)
		evs = l.events()
		require.Len(t, evs, 6, "events: %v", evs)
		assert.Equal(t, "lost", evs[5].what, "a release that returned %v was told %q", err, evs[5].what)
		assert.ErrorIs(t, evs[5].e.Cause, ErrLeaseLost)
		_ = mine.unlock(hctx)
		assert.Len(t, l.events(), 6, "a hold's end is told once")
	})
}

// The same for an Election's Resign of a leadership Redis lost.
func TestObserverToldLeaseLostWhenResignReturnsIt(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var l obsLog
		c := e.client(t, WithObserver(l.observer()))
		el := c.Election("obs-lost-elect")
		lctx, err := el.Campaign(marked("led"), "me")
		require.NoError(t, err)
		loseInRedis(t, e, "obs-lost-elect")
		err = el.Resign(lctx)
		require.ErrorIs(t, err, ErrLeaseLost)
		evs := l.events()
		require.Len(t, evs, 2, "events: %v", evs)
		assert.Equal(t, "lost", evs[1].what, "a Resign that returned %v was told %q", err, evs[1].what)
		assert.ErrorIs(t, evs[1].e.Cause, ErrLeaseLost)
	})
}
