package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wrongTypeCall is one call on a lock whose key holds another type.
type wrongTypeCall struct {
	what string
	call func(ctx context.Context) error
}

func ctxErr(_ context.Context, err error) error { return err }
func boolErr(_ bool, err error) error           { return err }
func intErr[T any](_ T, err error) error        { return err }

// lockCalls are the calls of a Mutex, a FairMutex and an RWMutex on name.
func lockCalls(c *Client, name string) []wrongTypeCall {
	m, f, r := c.Mutex(name), c.FairMutex(name), c.RWMutex(name)
	return []wrongTypeCall{
		{"Mutex.Lock", func(ctx context.Context) error { return ctxErr(m.Lock(ctx)) }},
		{"Mutex.TryLock", func(ctx context.Context) error { return ctxErr(m.TryLock(ctx)) }},
		{"Mutex.TryLockFor", func(ctx context.Context) error { return ctxErr(m.TryLockFor(ctx, 100*time.Millisecond)) }},
		{"Mutex.Do", func(ctx context.Context) error { return m.Do(ctx, func(context.Context) error { return nil }) }},
		{"Mutex.IsLocked", func(ctx context.Context) error { return boolErr(m.IsLocked(ctx)) }},
		{"Mutex.Holders", func(ctx context.Context) error { return intErr(m.Holders(ctx)) }},
		{"Mutex.ForceUnlock", func(ctx context.Context) error { return boolErr(m.ForceUnlock(ctx)) }},
		{"FairMutex.Lock", func(ctx context.Context) error { return ctxErr(f.Lock(ctx)) }},
		{"FairMutex.TryLock", func(ctx context.Context) error { return ctxErr(f.TryLock(ctx)) }},
		{"FairMutex.TryLockFor", func(ctx context.Context) error { return ctxErr(f.TryLockFor(ctx, 100*time.Millisecond)) }},
		{"FairMutex.Holders", func(ctx context.Context) error { return intErr(f.Holders(ctx)) }},
		{"FairMutex.ForceUnlock", func(ctx context.Context) error { return boolErr(f.ForceUnlock(ctx)) }},
		{"RWMutex.Lock", func(ctx context.Context) error { return ctxErr(r.Lock(ctx)) }},
		{"RWMutex.RLock", func(ctx context.Context) error { return ctxErr(r.RLock(ctx)) }},
		{"RWMutex.TryLock", func(ctx context.Context) error { return ctxErr(r.TryLock(ctx)) }},
		{"RWMutex.TryRLock", func(ctx context.Context) error { return ctxErr(r.TryRLock(ctx)) }},
		{"RWMutex.Holders", func(ctx context.Context) error { return intErr(r.Holders(ctx)) }},
		{"RWMutex.ForceUnlock", func(ctx context.Context) error { return boolErr(r.ForceUnlock(ctx)) }},
	}
}

func semCalls(c *Client, name string) []wrongTypeCall {
	s := c.Semaphore(name)
	return []wrongTypeCall{
		{"Semaphore.SetPermits", func(ctx context.Context) error { return s.SetPermits(ctx, 3) }},
		{"Semaphore.TrySetPermits", func(ctx context.Context) error { return boolErr(s.TrySetPermits(ctx, 3)) }},
		{"Semaphore.AddPermits", func(ctx context.Context) error { return s.AddPermits(ctx, 1) }},
		{"Semaphore.Acquire", func(ctx context.Context) error { return ctxErr(s.Acquire(ctx, 1)) }},
		{"Semaphore.TryAcquire", func(ctx context.Context) error { return ctxErr(s.TryAcquire(ctx, 1)) }},
		{"Semaphore.TryAcquireFor", func(ctx context.Context) error { return ctxErr(s.TryAcquireFor(ctx, 1, 100*time.Millisecond)) }},
		{"Semaphore.Available", func(ctx context.Context) error { return intErr(s.Available(ctx)) }},
		{"Semaphore.Holders", func(ctx context.Context) error { return intErr(s.Holders(ctx)) }},
	}
}

func otherCalls(c *Client, name string) []wrongTypeCall {
	ml := c.MultiLock([]string{name, name + ":other"})
	el := c.Election(name)
	return []wrongTypeCall{
		{"MultiLock.Lock", func(ctx context.Context) error { return ctxErr(ml.Lock(ctx)) }},
		{"MultiLock.TryLock", func(ctx context.Context) error { return ctxErr(ml.TryLock(ctx)) }},
		{"MultiLock.TryLockFor", func(ctx context.Context) error { return ctxErr(ml.TryLockFor(ctx, 100*time.Millisecond)) }},
		{"MultiLock.IsLocked", func(ctx context.Context) error { return boolErr(ml.IsLocked(ctx)) }},
		{"MultiLock.ForceUnlock", func(ctx context.Context) error { return boolErr(ml.ForceUnlock(ctx)) }},
		{"Election.Campaign", func(ctx context.Context) error { return ctxErr(el.Campaign(ctx, "me")) }},
		{"Election.TryCampaignFor", func(ctx context.Context) error { return ctxErr(el.TryCampaignFor(ctx, "me", 100*time.Millisecond)) }},
		{"Election.Leader", func(ctx context.Context) error { return intErr(el.Leader(ctx)) }},
	}
}

// checkWrongType runs calls, each of which must fail with an error that
// matches ErrWrongType, names key and says WRONGTYPE; and leaves key's
// value as it was (before: what Redis had).
func checkWrongType(t *testing.T, e *testEnv, key string, calls []wrongTypeCall) {
	t.Helper()
	bg := context.Background()
	before := redisState(t, e)
	for _, k := range calls {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		err := k.call(ctx)
		cancel()
		if assert.ErrorIs(t, err, ErrWrongType, "%s on %q", k.what, key) {
			assert.ErrorContains(t, err, "WRONGTYPE", k.what)
			assert.ErrorContains(t, err, `"`+key+`"`, k.what)
			assert.False(t, errors.Is(err, context.DeadlineExceeded), "%s waited: %v", k.what, err)
		}
	}
	assert.Equal(t, before, redisState(t, e), "the value of another type is kept")
}

// Issue 43: a call on a lock whose key holds a value of another type (a
// string, as redislock writes) or another kind of lock returns an error
// that matches ErrWrongType, on every primitive and every call that reads
// the key; nothing is written.
func TestErrWrongTypeOnEveryPrimitive(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rdb := e.rdb(t)
		c := e.client(t)

		require.NoError(t, rdb.Set(bg, "wt:str", "redislock-token", 0).Err())
		checkWrongType(t, e, "wt:str", append(append(lockCalls(c, "wt:str"), semCalls(c, "wt:str")...), otherCalls(c, "wt:str")...))

		// A latch is a string: a hash at its name is another type.
		require.NoError(t, rdb.HSet(bg, "wt:hash", "f", "v").Err())
		l := c.CountDownLatch("wt:hash")
		checkWrongType(t, e, "wt:hash", []wrongTypeCall{
			{"CountDownLatch.TrySetCount", func(ctx context.Context) error { return boolErr(l.TrySetCount(ctx, 2)) }},
			{"CountDownLatch.CountDown", l.CountDown},
			{"CountDownLatch.Count", func(ctx context.Context) error { return intErr(l.Count(ctx)) }},
			{"CountDownLatch.Wait", l.Wait},
			{"CountDownLatch.Delete", func(ctx context.Context) error { return boolErr(l.Delete(ctx)) }},
		})
	})
}

// Another kind of redisync lock at the name: what tells the kinds apart
// refuses it with ErrWrongType (a Semaphore's hash under a Mutex's or an
// RWMutex's calls, a Mutex's hash under a Semaphore's or an RWMutex's).
func TestErrWrongTypeForAnotherKindOfLock(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		require.NoError(t, c.Semaphore("wt:sem").SetPermits(bg, 2))
		m, r := c.Mutex("wt:sem"), c.RWMutex("wt:sem")
		checkWrongType(t, e, "wt:sem", []wrongTypeCall{
			{"Mutex.Holders", func(ctx context.Context) error { return intErr(m.Holders(ctx)) }},
			{"Mutex.ForceUnlock", func(ctx context.Context) error { return boolErr(m.ForceUnlock(ctx)) }},
			{"RWMutex.Lock", func(ctx context.Context) error { return ctxErr(r.Lock(ctx)) }},
			{"RWMutex.RLock", func(ctx context.Context) error { return ctxErr(r.RLock(ctx)) }},
			{"RWMutex.Holders", func(ctx context.Context) error { return intErr(r.Holders(ctx)) }},
		})

		hctx, err := c.Mutex("wt:mx").Lock(bg)
		require.NoError(t, err)
		s, rw := c.Semaphore("wt:mx"), c.RWMutex("wt:mx")
		checkWrongType(t, e, "wt:mx", []wrongTypeCall{
			{"Semaphore.TryAcquire", func(ctx context.Context) error { return ctxErr(s.TryAcquire(ctx, 1)) }},
			{"Semaphore.Acquire", func(ctx context.Context) error { return ctxErr(s.Acquire(ctx, 1)) }},
			{"Semaphore.Holders", func(ctx context.Context) error { return intErr(s.Holders(ctx)) }},
			{"RWMutex.RLock", func(ctx context.Context) error { return ctxErr(rw.RLock(ctx)) }},
			{"RWMutex.Holders", func(ctx context.Context) error { return intErr(rw.Holders(ctx)) }},
		})
		require.NoError(t, c.Mutex("wt:mx").Unlock(hctx))
	})
}
