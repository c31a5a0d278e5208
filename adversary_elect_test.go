package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Redis loses its data (FLUSHALL, as a restart without persistence does)
// while a leader leads: its leadership ends, and Observe promises to
// report "Term 0 whenever a leadership ends with nobody leading after it";
// an observer re-reads at least every third of its lease, so it must see
// that nobody leads within about a lease, as Leader says at once.
func TestAdvElectionObserveAfterDataLoss(t *testing.T) {
	env := realEnv(t)
	bg := context.Background()
	const lease = 600 * time.Millisecond
	c1 := env.client(t, WithWatchdogTimeout(lease))
	c2 := env.client(t, WithWatchdogTimeout(lease))
	e1 := c1.Election("elect:loss")
	octx, stop := context.WithCancel(bg)
	defer stop()
	o := observe(t, c2.Election("elect:loss"), octx)
	o.waitFor(Leadership{}, 2*time.Second)
	lctx, err := e1.Campaign(bg, "node-1")
	require.NoError(t, err)
	term, _ := e1.Term(lctx)
	o.waitFor(Leadership{Value: "node-1", Term: term}, time.Second)

	require.NoError(t, env.rdb(t).FlushAll(bg).Err())
	l, err := c2.Election("elect:loss").Leader(bg)
	require.NoError(t, err)
	assert.Equal(t, Leadership{}, l, "Leader: nobody leads")
	select {
	case <-lctx.Done():
	case <-time.After(2 * lease):
		t.Fatal("the leader was not told")
	}
	o.waitFor(Leadership{}, 2*lease)

	// A new leader after the loss: a greater term (TIME), and seen.
	lctx2, err := c2.Election("elect:loss").Campaign(bg, "node-2")
	require.NoError(t, err)
	term2, _ := c2.Election("elect:loss").Term(lctx2)
	assert.Greater(t, term2, term)
	o.waitFor(Leadership{Value: "node-2", Term: term2}, time.Second)
	stop()
	<-o.done
	o.check()
}

// The observers' subscription connections are killed (CLIENT KILL TYPE
// pubsub) right before each change, so the change's message is lost:
// with the default lease (a re-read every 10s) an observer must still see
// each change soon, as it re-reads once its subscription is back.
func TestAdvElectionObserveMessageLostOnKill(t *testing.T) {
	env := realEnv(t)
	bg := context.Background()
	admin := env.rdb(t)
	c1, c2 := env.client(t), env.client(t)
	e1 := c1.Election("elect:lost")
	octx, stop := context.WithCancel(bg)
	defer stop()
	o := observe(t, c2.Election("elect:lost"), octx)
	o.waitFor(Leadership{}, 2*time.Second)
	for i := range 5 {
		require.NoError(t, admin.ClientKillByFilter(bg, "TYPE", "pubsub").Err())
		lctx, err := e1.Campaign(bg, "v")
		require.NoError(t, err)
		term, _ := e1.Term(lctx)
		o.waitFor(Leadership{Value: "v", Term: term}, 2*time.Second)
		require.NoError(t, admin.ClientKillByFilter(bg, "TYPE", "pubsub").Err())
		if i%2 == 0 {
			require.NoError(t, e1.Resign(lctx))
		} else {
			require.NoError(t, admin.Del(bg, "elect:lost").Err()) // a crash, as seen from Redis
		}
		o.waitFor(Leadership{}, 2*time.Second)
	}
	stop()
	<-o.done
	o.check()
}

// Names that look alike are different elections ("e" and "{e}"), and an
// Election and a Mutex of one name exclude each other (the name is the key
// of both): neither takes the other's key.
func TestAdvElectionNameCollisions(t *testing.T) {
	env := realEnv(t)
	bg := context.Background()
	c1, c2 := env.client(t), env.client(t)
	a, b := c1.Election("e"), c2.Election("{e}")
	actx, err := a.Campaign(bg, "a")
	require.NoError(t, err)
	bctx, err := b.Campaign(bg, "b")
	require.NoError(t, err, "{e} is another election")
	ta, _ := a.Term(actx)
	tb, _ := b.Term(bctx)
	la, err := c2.Election("e").Leader(bg)
	require.NoError(t, err)
	assert.Equal(t, Leadership{Value: "a", Term: ta}, la)
	lb, err := c1.Election("{e}").Leader(bg)
	require.NoError(t, err)
	assert.Equal(t, Leadership{Value: "b", Term: tb}, lb)

	// A Mutex of a led election's name is held elsewhere.
	_, err = c2.Mutex("e").TryLock(bg)
	assert.ErrorIs(t, err, ErrNotAcquired)
	_, err = c2.MultiLock([]string{"e", "f"}).TryLock(bg)
	assert.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, a.Resign(actx))
	require.NoError(t, b.Resign(bctx))

	// An Election whose name a Mutex holds waits for it.
	mctx, err := c2.Mutex("e").Lock(bg)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	_, err = a.Campaign(wctx, "a")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, c2.Mutex("e").Unlock(mctx))
	actx, err = a.Campaign(bg, "a")
	require.NoError(t, err)
	t2, _ := a.Term(actx)
	assert.Greater(t, t2, ta)
	require.NoError(t, a.Resign(actx))
	assert.ElementsMatch(t, []string{"{e}:elect-term:e", "{e}:elect-term:{e}"}, env.keys(t))
}

// Resign races the end of the campaign's context, again and again: Resign
// says nil either way (the leadership ended with its context, or by the
// Resign), the next candidate leads at once each time, and observers see
// every leader, then nobody, in order.
func TestAdvElectionResignRacesCancel(t *testing.T) {
	env := realEnv(t)
	bg := context.Background()
	c1, c2, c3 := env.client(t), env.client(t), env.client(t)
	e1, e2 := c1.Election("elect:race"), c2.Election("elect:race")
	octx, stop := context.WithCancel(bg)
	defer stop()
	o := observe(t, c3.Election("elect:race"), octx)
	o.waitFor(Leadership{}, 2*time.Second)
	var lastTwo int64
	for i := range 40 {
		ctx, cancel := context.WithCancel(bg)
		lctx, err := e1.Campaign(ctx, "one")
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			wctx, wcancel := context.WithTimeout(bg, 5*time.Second)
			defer wcancel()
			l2, err := e2.Campaign(wctx, "two")
			if err == nil {
				lastTwo, _ = e2.Term(l2)
				err = e2.Resign(l2)
			}
			got <- err
		}()
		eventually(t, 2*time.Second, "the candidate to wait", func() bool { return localWaiters(c2, e2.channel) == 1 })
		lag := watchLag(t)
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- e1.Resign(lctx) }()
		if i%2 == 0 {
			cancel()
		} else {
			time.Sleep(time.Duration(i*10) * time.Microsecond)
			cancel()
		}
		assert.NoError(t, <-done, "round %d", i)
		require.NoError(t, <-got, "round %d", i)
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the candidate led at once (the machine's worst delay meanwhile: %v)", lag.Worst())
		lag.Stop()
	}
	eventually(t, time.Second, "the observer to see the last leader", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.seen) >= 2 && o.seen[len(o.seen)-2].Term == lastTwo
	})
	o.waitFor(Leadership{}, time.Second)
	stop()
	<-o.done
	seen := o.check()
	assert.Len(t, seen, 1+2*40*2, "every leader, and nobody after each: %v", seen)
	assert.Equal(t, []string{"{elect:race}:elect-term:elect:race"}, env.keys(t))
}
