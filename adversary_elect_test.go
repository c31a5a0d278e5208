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
		if i%2 == 1 {
			<-lctx.Done()
		}
	}
	stop()
	<-o.done
	o.check()
}
