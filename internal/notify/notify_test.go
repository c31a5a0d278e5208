package notify

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// The hub on its own, against a real server: channels subscribed while
// someone waits, messages waking as many waiters as the policy says, a
// killed connection subscribed again with its waiters told to look again,
// and Close ending every wait.

var errClosed = errors.New("test: closed")

var bg = context.Background()

type hubEnv struct {
	rdb    *redis.Client
	admin  *redis.Client
	hub    *Hub
	closed chan struct{}

	mu       sync.Mutex
	lost     int
	restored int
}

// newHub returns a hub on a private server, in classic mode, closed with the
// test.
func newHub(t *testing.T, hold func(string, time.Time) (time.Time, bool)) *hubEnv {
	t.Helper()
	srv := redistest.Start(t)
	e := &hubEnv{rdb: srv.Client(t), admin: srv.Client(t), closed: make(chan struct{})}
	if hold == nil {
		hold = func(string, time.Time) (time.Time, bool) { return time.Time{}, false }
	}
	e.hub = New(Config{
		RDB: e.rdb, Closed: e.closed, ClosedErr: errClosed,
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mode:     func(context.Context) (bool, bool) { return false, true },
		Hold:     hold,
		Lost:     func(string, error) { e.mu.Lock(); e.lost++; e.mu.Unlock() },
		Restored: func(string, time.Duration) { e.mu.Lock(); e.restored++; e.mu.Unlock() },
	})
	t.Cleanup(e.close)
	return e
}

func (e *hubEnv) close() {
	select {
	case <-e.closed:
	default:
		close(e.closed)
		e.hub.Close()
	}
}

// waiterOn subscribes a waiter and waits for Redis to confirm it.
func (e *hubEnv) waiterOn(t *testing.T, name string, wake func(string) int) *Waiter {
	t.Helper()
	w, err := e.hub.Subscribe(name, wake)
	require.NoError(t, err)
	require.NoError(t, w.Ready(bg, 5*time.Second))
	ch, ok := e.hub.Channel(name)
	require.True(t, ok)
	require.True(t, ch.Subscribed, "Ready returned before the subscription was confirmed")
	return w
}

// woken reports whether w is woken within d.
func woken(t *testing.T, w *Waiter, d time.Duration) bool {
	t.Helper()
	ok, err := w.Wait(bg, d)
	require.NoError(t, err)
	return ok
}

func numSub(t *testing.T, rdb *redis.Client, name string) int64 {
	n, err := rdb.PubSubNumSub(bg, name).Result()
	require.NoError(t, err)
	return n[name]
}

func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	require.Eventually(t, f, d, 5*time.Millisecond, what)
}

func TestOneWaiterPerMessageInArrivalOrder(t *testing.T) {
	e := newHub(t, nil)
	a := e.waiterOn(t, "n:one", WakeOne)
	b := e.waiterOn(t, "n:one", WakeOne)
	require.NoError(t, e.admin.Publish(bg, "n:one", "0").Err())
	assert.True(t, woken(t, a, 2*time.Second), "the first waiter is woken")
	assert.False(t, woken(t, b, 100*time.Millisecond), "one message wakes one waiter")
	require.NoError(t, e.admin.Publish(bg, "n:one", "0").Err())
	assert.True(t, woken(t, a, 2*time.Second) || woken(t, b, time.Millisecond), "the next message wakes a waiter")
	a.Leave()
	b.Leave()
}

func TestWakeAllAndWatchers(t *testing.T) {
	e := newHub(t, nil)
	ws := []*Waiter{e.waiterOn(t, "n:all", WakeAll), e.waiterOn(t, "n:all", WakeAll)}
	watcher, err := e.hub.Watch("n:all", WakeAll)
	require.NoError(t, err)
	_, _ = watcher.Take()
	require.NoError(t, e.admin.Publish(bg, "n:all", "hello").Err())
	for i, w := range ws {
		assert.True(t, woken(t, w, 2*time.Second), "waiter %d", i)
	}
	require.True(t, woken(t, watcher, 2*time.Second))
	msgs, missed := watcher.Take()
	assert.Equal(t, []string{"hello"}, msgs)
	assert.False(t, missed)
	for _, w := range append(ws, watcher) {
		w.Leave()
	}
}

// A channel is subscribed in Redis while it has a local waiter, and only
// then: the last Leave unsubscribes it.
func TestLastLeaveUnsubscribes(t *testing.T) {
	e := newHub(t, nil)
	a := e.waiterOn(t, "n:leave", WakeOne)
	b := e.waiterOn(t, "n:leave", WakeOne)
	assert.EqualValues(t, 1, numSub(t, e.admin, "n:leave"), "one subscription for both waiters")
	a.Leave()
	assert.EqualValues(t, 1, numSub(t, e.admin, "n:leave"))
	b.Leave()
	eventually(t, 2*time.Second, "unsubscribed", func() bool { return numSub(t, e.admin, "n:leave") == 0 })
	assert.Empty(t, e.hub.Channels())
}

// A waiter that leaves with a wake-up it did not take passes it on.
func TestLeavePassesOnAnUntakenWakeUp(t *testing.T) {
	e := newHub(t, nil)
	a := e.waiterOn(t, "n:pass", WakeOne)
	b := e.waiterOn(t, "n:pass", WakeOne)
	require.NoError(t, e.admin.Publish(bg, "n:pass", "0").Err())
	eventually(t, 2*time.Second, "a woken", func() bool { return len(a.Woken()) == 1 })
	a.Leave()
	assert.True(t, woken(t, b, time.Second), "b got a's wake-up")
	b.Leave()
}

// A mark taken on a confirmed channel tells a waiter whether anything was
// delivered since: with nothing, it need not look again.
func TestMarkTellsWhatWasMissed(t *testing.T) {
	e := newHub(t, nil)
	a := e.waiterOn(t, "n:mark", WakeOne)
	m, queued, _ := e.hub.Mark("n:mark")
	assert.True(t, queued)
	b, err := e.hub.Subscribe("n:mark", WakeOne)
	require.NoError(t, err)
	assert.False(t, b.Missed(m), "nothing delivered since the mark")
	require.NoError(t, e.admin.Publish(bg, "n:mark", "0").Err())
	assert.True(t, woken(t, a, 2*time.Second))
	assert.True(t, b.Missed(m), "a message was delivered since the mark")
	assert.True(t, b.Missed(Mark{}), "an empty mark misses everything")
	a.Leave()
	b.Leave()
}

// A subscription connection killed by Redis is subscribed again by itself,
// its waiters are woken to look again (a message may have been lost
// meanwhile), and Lost and Restored are told.
func TestKilledConnectionResubscribesAndWakesItsWaiters(t *testing.T) {
	e := newHub(t, nil)
	w := e.waiterOn(t, "n:kill", WakeOne)
	require.NoError(t, e.admin.Do(bg, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	assert.True(t, woken(t, w, 5*time.Second), "the waiter was told to look again")
	eventually(t, 5*time.Second, "subscribed again", func() bool {
		ch, _ := e.hub.Channel("n:kill")
		return ch.Subscribed && numSub(t, e.admin, "n:kill") == 1
	})
	e.mu.Lock()
	assert.Equal(t, 1, e.lost)
	assert.Equal(t, 1, e.restored)
	e.mu.Unlock()
	require.NoError(t, e.admin.Publish(bg, "n:kill", "0").Err())
	assert.True(t, woken(t, w, 2*time.Second), "messages reach the waiter again")
	w.Leave()
}

// Config.Hold holds a wake-up back until the time it says, then delivers
// it.
func TestHoldDefersWakeUps(t *testing.T) {
	var until time.Time
	var mu sync.Mutex
	e := newHub(t, func(string, time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		return until, time.Now().Before(until)
	})
	w := e.waiterOn(t, "n:hold", WakeOne)
	mu.Lock()
	until = time.Now().Add(300 * time.Millisecond)
	mu.Unlock()
	require.NoError(t, e.admin.Publish(bg, "n:hold", "0").Err())
	assert.False(t, woken(t, w, 150*time.Millisecond), "held back")
	assert.True(t, woken(t, w, 2*time.Second), "delivered when the hold ends")
	w.Leave()
}

// Close ends every wait with Config.ClosedErr, refuses new ones, and stops
// every connection.
func TestCloseEndsWaits(t *testing.T) {
	e := newHub(t, nil)
	w := e.waiterOn(t, "n:close", WakeOne)
	done := make(chan error, 1)
	go func() { _, err := w.Wait(bg, time.Minute); done <- err }()
	e.close()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, errClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("a wait outlived Close")
	}
	_, err := e.hub.Subscribe("n:other", WakeOne)
	assert.ErrorIs(t, err, errClosed)
	eventually(t, 2*time.Second, "no subscription left in Redis", func() bool { return numSub(t, e.admin, "n:close") == 0 })
	assert.Empty(t, e.hub.Nodes())
}

// A mode that needs no look-up is resolved at once: the one wanted, or
// classic pub/sub on a single node, where Auto asks nothing.
func TestModeResolvedWithoutLookUp(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	var told []uint8
	m := NewMode(rdb, Auto, func(from, to uint8) { told = append(told, from, to) })
	assert.Equal(t, Classic, m.Get())
	assert.Equal(t, "publish", m.Publish())
	sharded, ok := m.Sharded(context.Background())
	assert.True(t, ok)
	assert.False(t, sharded)

	m = NewMode(rdb, Sharded, nil)
	assert.Equal(t, Sharded, m.Current())
	assert.Equal(t, "spublish", m.Publish())
	assert.Empty(t, told, "nothing was detected")
}

// How lua/handoff.lua counts a channel's subscribers: where the channel's
// messages go (the lock's node with sharded pub/sub, the one server of a
// single node), and not at all for classic pub/sub on a Cluster, whose
// subscribers may be on any node.
func TestModeSubCounterFollowsTopology(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	single, cluster := NewMode(rdb, Classic, nil), NewMode(cc, Classic, nil)
	assert.Equal(t, "numsub", single.SubCounter("publish"))
	assert.Equal(t, "shardnumsub", single.SubCounter("spublish"))
	assert.Equal(t, "any", cluster.SubCounter("publish"))
	assert.Equal(t, "shardnumsub", cluster.SubCounter("spublish"))
}
