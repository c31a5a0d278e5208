package notify

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
)

// The subscription follows the primary (switch.go): a switch moves the
// channels it concerns to a new connection, whose confirmation wakes their
// waiters; and the Hub wants switches learned while it has channels.

// wants counts a Hub's want of switches (Config.Watch).
type wants struct {
	mu      sync.Mutex
	n, made int
}

func (w *wants) watch() (done func()) {
	w.mu.Lock()
	w.n++
	w.made++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			w.n--
			w.mu.Unlock()
		})
	}
}

func (w *wants) now() (live, made int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.made
}

// pubsubIDs returns the ids of the pub/sub clients connected to the
// server admin is on.
func pubsubIDs(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	list, err := admin.ClientList(bg).Result()
	require.NoError(t, err)
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if !strings.Contains(line, " flags=P ") || len(f) == 0 {
			continue
		}
		ids = append(ids, strings.TrimPrefix(f[0], "id="))
	}
	return ids
}

// On a single node (and under Sentinel), a switch closes the subscription
// connection and subscribes its channels again on a new one (which
// go-redis dials to the primary of the moment); the waiters are woken
// once the new connection confirmed their channel, and hear its messages.
// The Hub wants switches while it has channels, and not after.
func TestSwitchedMovesTheSubscription(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	w := &wants{}
	closed := make(chan struct{})
	hub := New(Config{RDB: srv.Client(t), Closed: closed, ClosedErr: errClosed,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mode:  func(context.Context) (bool, bool) { return false, true },
		Hold:  func(string, time.Time) (time.Time, bool) { return time.Time{}, false },
		Watch: w.watch})
	hub.SetMode(false)
	e := &hubEnv{rdb: srv.Client(t), admin: admin, hub: hub, closed: closed}
	t.Cleanup(e.close)

	a := e.waiterOn(t, "n:switch", WakeOne)
	b := e.waiterOn(t, "n:other", WakeOne)
	live, made := w.now()
	assert.Equal(t, 1, live, "switches wanted while the Hub has channels")
	assert.Equal(t, 1, made, "wanted once for all its channels")
	before := pubsubIDs(t, admin)
	require.Len(t, before, 1)

	hub.Switched(transport.Switch{Cause: "test"})
	for _, x := range []*Waiter{a, b} {
		require.True(t, woken(t, x, 5*time.Second), "a waiter told to look again")
		ch, _ := hub.Channel(x.ch.name)
		assert.True(t, ch.Subscribed, "woken once subscribed again")
	}
	eventually(t, 5*time.Second, "the old connection closed, a new one open", func() bool {
		ids := pubsubIDs(t, admin)
		return len(ids) == 1 && ids[0] != before[0]
	})
	assert.EqualValues(t, 1, numSub(t, admin, "n:switch"))
	require.NoError(t, admin.Publish(bg, "n:switch", "0").Err())
	assert.True(t, woken(t, a, 2*time.Second), "messages reach the waiter on the new connection")

	a.Leave()
	live, _ = w.now()
	assert.Equal(t, 1, live, "still wanted: a channel is left")
	b.Leave()
	live, made = w.now()
	assert.Equal(t, 0, live, "not wanted once the Hub has no channel")
	c := e.waiterOn(t, "n:again", WakeOne)
	live, made2 := w.now()
	assert.Equal(t, 1, live)
	assert.Equal(t, made+1, made2)
	_ = c
	e.close()
	live, _ = w.now()
	assert.Equal(t, 0, live, "Close ends the want")
}

// On a Cluster, a switch of other slots, or of the channel's slot to the
// node it is on, moves nothing (no wake-up, no new subscription); in
// classic mode nothing moves at all (a PUBLISH reaches every node). (The
// move of a sharded channel in a real failover is
// TestSubscriptionFollowsClusterFailover's, in the root package.)
func TestSwitchedOnClusterMovesOnlyWhatItConcerns(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	for _, sharded := range []bool{false, true} {
		closed := make(chan struct{})
		hub := New(Config{RDB: cc, Closed: closed, ClosedErr: errClosed,
			Log:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Mode: func(context.Context) (bool, bool) { return sharded, true },
			Hold: func(string, time.Time) (time.Time, bool) { return time.Time{}, false }})
		hub.SetMode(sharded)
		e := &hubEnv{hub: hub, closed: closed}
		t.Cleanup(e.close)
		const name = "{n}switch"
		w := e.waiterOn(t, name, WakeOne)
		ch, _ := hub.Channel(name)
		slot := keys.Slot(name)
		for _, s := range []transport.Switch{
			{Slots: []transport.SlotRange{{First: slot + 1, Last: 16383}}, To: transport.Server{Addr: "127.0.0.1:1"}},
			{Slots: []transport.SlotRange{{First: slot, Last: slot}}, To: transport.Server{Addr: ch.Node}},
		} {
			hub.Switched(s)
		}
		if !sharded {
			hub.Switched(transport.Switch{Slots: []transport.SlotRange{{First: 0, Last: 16383}}})
		}
		assert.False(t, woken(t, w, rerouteAfter+300*time.Millisecond), "sharded %v: woken by a switch that moves nothing", sharded)
		now, _ := hub.Channel(name)
		assert.Equal(t, ch.Node, now.Node)
		assert.True(t, now.Subscribed)
		w.Leave()
		e.close()
	}
}
