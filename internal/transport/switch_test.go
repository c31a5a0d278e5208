package transport

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// The switches of the primary (switch.go): what a report tells its
// listeners, and the watcher on a Sentinel group and on a Cluster.

// infoCounter counts the INFO commands sent through the clients it hooks.
// failoverGroup starts a primary, a replica of it and a Sentinel watching
// them, and returns them with a failover client of that Sentinel's,
// closed when the test ends.
func failoverGroup(t *testing.T) (master, replica *redistest.Server, s *redistest.Sentinel, rdb *redis.Client) {
	master = redistest.Start(t)
	replica = redistest.StartReplica(t, master)
	s = redistest.StartSentinel(t, master, "redisync", 1)
	rdb = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Addr()},
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return master, replica, s, rdb
}

type infoCounter struct{ n atomic.Int64 }

func (c *infoCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *infoCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "info") {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *infoCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// collector records the switches told to it.
type collector struct {
	mu sync.Mutex
	ss []Switch
	c  chan Switch
}

func newCollector() *collector { return &collector{c: make(chan Switch, 64)} }

func (c *collector) f(s Switch) {
	c.mu.Lock()
	c.ss = append(c.ss, s)
	c.mu.Unlock()
	c.c <- s
}

func (c *collector) all() []Switch {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Switch(nil), c.ss...)
}

// next returns the next switch told, failing after d (plus the machine's
// measured delay).
func (c *collector) next(t *testing.T, d time.Duration, lag *redistest.Lag) Switch {
	t.Helper()
	start := time.Now()
	for {
		select {
		case s := <-c.c:
			return s
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > d+lag.Slack() {
			t.Fatalf("no switch told within %v (the machine's worst delay: %v)", time.Since(start), lag.Worst())
		}
	}
}

// Reports are told once each: again with the same new primary, or with
// none within SwitchMerge, they are dropped; per slot on a Cluster's
// ranges. Listeners are told in order, from a goroutine of the
// transport's (a listener that blocks does not block the reporter), until
// they stop or the transport closes.
func TestSwitchedToldOnce(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	tr := New(rdb, Options{})
	col := newCollector()
	stop := tr.OnSwitch(col.f)
	at := time.Now()
	b, c := Server{ReplID: "b"}, Server{ReplID: "c"}
	r := func(s SlotRange) []SlotRange { return []SlotRange{s} }
	for _, s := range []Switch{
		{From: Server{ReplID: "a"}, To: b, At: at},                        // told
		{From: Server{ReplID: "a"}, To: b, At: at.Add(5 * time.Second)},   // the same new primary
		{From: Server{Addr: "x:1"}, At: at.Add(time.Millisecond)},         // none named, within SwitchMerge
		{To: Server{Addr: "p:1"}, At: at.Add(time.Second)},                // does not contradict b
		{To: c, At: at.Add(2 * time.Second)},                              // told
		{From: c, At: at.Add(4 * time.Second)},                            // told: none named, after SwitchMerge
		{To: Server{ReplID: "h"}, At: at.Add(4100 * time.Millisecond)},    // told: the first to name the new one
		{Slots: r(SlotRange{0, 100}), To: Server{Addr: "m1"}, At: at},     // told
		{Slots: r(SlotRange{50, 60}), To: Server{Addr: "m1"}, At: at},     // told there already
		{Slots: r(SlotRange{50, 200}), To: Server{Addr: "m1"}, At: at},    // told: 101-200 is news
		{Slots: r(SlotRange{0, 200}), To: Server{Addr: "m1"}, At: at},     // told there already
		{Slots: r(SlotRange{150, 160}), To: Server{Addr: "m2"}, At: at},   // told: another primary
		{Slots: r(SlotRange{0, 200}), At: at.Add(100 * time.Millisecond)}, // none named, within SwitchMerge
		{Slots: []SlotRange{{0, 10}, {300, 300}}, At: at},                 // told: 300 is news
	} {
		tr.Switched(s)
	}
	lag := watchLag(t)
	var got []Switch
	for range 8 {
		got = append(got, col.next(t, time.Second, lag))
	}
	want := []Switch{
		{From: Server{ReplID: "a"}, To: b},
		{To: c},
		{From: c},
		{To: Server{ReplID: "h"}},
		{Slots: r(SlotRange{0, 100}), To: Server{Addr: "m1"}},
		{Slots: r(SlotRange{50, 200}), To: Server{Addr: "m1"}},
		{Slots: r(SlotRange{150, 160}), To: Server{Addr: "m2"}},
		{Slots: []SlotRange{{0, 10}, {300, 300}}},
	}
	for i := range got {
		got[i].At = time.Time{}
	}
	assert.Equal(t, want, got)
	select {
	case s := <-col.c:
		t.Fatalf("told more: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}

	// A listener that blocks holds back the next switches, never the
	// reporter.
	block, blocked := make(chan struct{}), make(chan struct{}, 1)
	stopBlocking := tr.OnSwitch(func(Switch) {
		blocked <- struct{}{}
		<-block
	})
	tr.Switched(Switch{To: Server{ReplID: "d"}})
	<-blocked
	start := time.Now()
	tr.Switched(Switch{To: Server{ReplID: "e"}})
	assert.Less(t, time.Since(start), 100*time.Millisecond+lag.Slack(), "a report waited for a listener")
	assert.Equal(t, "d", col.next(t, time.Second, lag).To.ReplID, "told in order, to each listener")
	close(block)
	<-blocked
	assert.Equal(t, "e", col.next(t, time.Second, lag).To.ReplID)
	stopBlocking()

	stop()
	tr.Switched(Switch{To: Server{ReplID: "f"}})
	tr.Close()
	tr.Switched(Switch{To: Server{ReplID: "g"}})
	tr.Drain(time.Second)
	select {
	case s := <-col.c:
		t.Fatalf("told after stop: %+v", s)
	case <-time.After(100 * time.Millisecond):
	}
}

// diffOwners tells, for each pair of masters, the slots the first served
// and the second serves now.
func TestSwitchDiffOwners(t *testing.T) {
	old := []slotOwner{{SlotRange{0, 5460}, "a"}, {SlotRange{5461, 10922}, "b"}, {SlotRange{10923, 16383}, "c"}}
	assert.Empty(t, diffOwners(old, old))
	now := []slotOwner{{SlotRange{0, 5460}, "a2"}, {SlotRange{5461, 6000}, "c"}, {SlotRange{6001, 10922}, "b"}, {SlotRange{10923, 16383}, "c"}}
	assert.Equal(t, []Switch{
		{Slots: []SlotRange{{0, 5460}}, From: Server{Addr: "a"}, To: Server{Addr: "a2"}, Cause: "slots"},
		{Slots: []SlotRange{{5461, 6000}}, From: Server{Addr: "b"}, To: Server{Addr: "c"}, Cause: "slots"},
	}, diffOwners(old, now))
	// Slots nobody serves now are no switch; slots served anew are.
	gap := []slotOwner{{SlotRange{0, 99}, "a"}, {SlotRange{200, 16383}, "d"}}
	assert.Equal(t, []Switch{
		{Slots: []SlotRange{{200, 5460}}, From: Server{Addr: "a"}, To: Server{Addr: "d"}, Cause: "slots"},
		{Slots: []SlotRange{{5461, 10922}}, From: Server{Addr: "b"}, To: Server{Addr: "d"}, Cause: "slots"},
		{Slots: []SlotRange{{10923, 16383}}, From: Server{Addr: "c"}, To: Server{Addr: "d"}, Cause: "slots"},
	}, diffOwners(old, gap))
	assert.Equal(t, []Switch{
		{Slots: []SlotRange{{100, 199}}, To: Server{Addr: "a"}, Cause: "slots"},
	}, diffOwners(gap, []slotOwner{{SlotRange{0, 199}, "a"}, {SlotRange{200, 16383}, "d"}}))
}

// countWhile counts the INFO commands c sees during d.
func countWhile(c *infoCounter, d time.Duration) int64 {
	n := c.n.Load()
	time.Sleep(d)
	return c.n.Load() - n
}

// No watcher runs on a plain single node: it has no other primary.
func TestSwitchWatcherNotOnSingleNode(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	infos := &infoCounter{}
	rdb.AddHook(infos)
	tr := newT(t, rdb, Options{})
	done := tr.WatchSwitches()
	defer done()
	assert.Zero(t, countWhile(infos, 3*SwitchEvery))
}

// On a Sentinel failover client, the watcher asks the primary behind the
// command connections once every SwitchEvery while switches are wanted,
// and nothing once they are not; a planned failover is told within a
// round of +switch-master, naming the new primary by its replication id;
// Close ends the watcher.
func TestSwitchWatcherSentinel(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	master, replica, s, rdb := failoverGroup(t)
	infos := &infoCounter{}
	rdb.AddHook(infos)
	tr := New(rdb, Options{})
	col := newCollector()
	tr.OnSwitch(col.f)
	ctx := context.Background()
	oldID, err := ReplID(ctx, master.Client(t))
	require.NoError(t, err)

	done := tr.WatchSwitches()
	const window = 2 * time.Second
	n := countWhile(infos, window)
	t.Logf("INFO calls per second while wanted: %.1f", float64(n)/window.Seconds())
	assert.LessOrEqual(t, n, int64(window/SwitchEvery)+1, "more than one INFO per SwitchEvery")
	assert.Positive(t, n)

	switched, addr := s.Failover(t)
	require.Equal(t, replica.Addr(), addr)
	lag := watchLag(t)
	sw := col.next(t, 2*SwitchEvery+500*time.Millisecond, lag) // go-redis follows within ~0.3s
	t.Logf("told %v after +switch-master: %+v", time.Since(switched), sw)
	newID, err := ReplID(ctx, replica.Client(t))
	require.NoError(t, err)
	assert.Nil(t, sw.Slots)
	assert.Equal(t, Server{ReplID: oldID}, sw.From)
	assert.Equal(t, Server{ReplID: newID}, sw.To)
	assert.Equal(t, "replid", sw.Cause)

	done()
	time.Sleep(3 * SwitchEvery) // at most a round more
	assert.Zero(t, countWhile(infos, 3*SwitchEvery), "INFO asked while nobody wants switches")
	assert.Len(t, col.all(), 1, "told once")

	tr.WatchSwitches() // never done: Close ends it
	time.Sleep(SwitchEvery)
	tr.Close()
	tr.Drain(5 * time.Second)
	ended := make(chan struct{})
	go func() { tr.sw.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the watcher still runs after Close and Drain")
	}
	assert.Zero(t, countWhile(infos, 2*SwitchEvery), "INFO asked after Close")
}

// On a Cluster, the watcher asks each master once every SwitchEvery
// while switches are wanted; a planned CLUSTER FAILOVER is told within a
// round of the promotion, naming the slots, the old master and the new.
func TestSwitchWatcherCluster(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	infos := &infoCounter{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), NewClient: func(o *redis.Options) *redis.Client {
		n := redis.NewClient(o)
		n.AddHook(infos)
		return n
	}})
	t.Cleanup(func() { _ = cc.Close() })
	tr := newT(t, cc, Options{})
	col := newCollector()
	tr.OnSwitch(col.f)
	ctx := context.Background()
	require.NoError(t, cc.Ping(ctx).Err())

	done := tr.WatchSwitches()
	defer done()
	const window = 2 * time.Second
	n := countWhile(infos, window)
	t.Logf("INFO calls per second per master while wanted: %.1f", float64(n)/window.Seconds()/3)
	assert.LessOrEqual(t, n, 3*(int64(window/SwitchEvery)+1), "more than one INFO per master per SwitchEvery")
	assert.Positive(t, n)

	old, replica := cl.Masters[0], cl.Replicas[0][0]
	ranges, err := cc.ClusterSlots(ctx).Result()
	require.NoError(t, err)
	var want []SlotRange
	for _, r := range ranges {
		if r.Nodes[0].Addr == old.Addr() {
			want = append(want, SlotRange{int(r.Start), int(r.End)})
		}
	}
	promoted := make(chan time.Time, 1)
	go func() {
		rc := replica.Client(t)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if role, err := rc.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
				promoted <- time.Now()
				return
			}
		}
	}()
	cl.Failover(t, 0, false)
	at := <-promoted
	lag := watchLag(t)
	sw := col.next(t, 2*SwitchEvery+500*time.Millisecond, lag)
	t.Logf("told %v after the promotion: %+v", time.Since(at), sw)
	assert.Equal(t, want, sw.Slots)
	assert.Equal(t, old.Addr(), sw.From.Addr)
	assert.Equal(t, replica.Addr(), sw.To.Addr)
	assert.Equal(t, "slots", sw.Cause)
	time.Sleep(4 * SwitchEvery)
	assert.Len(t, col.all(), 1, "told once")
}

// Servers that refuse INFO (an ACL) are asked again only after
// refusedPause, and the log says once why switches go unseen.
func TestSwitchWatcherRefused(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	for _, m := range cl.Masters {
		mc := m.Client(t)
		require.NoError(t, mc.Do(ctx, "ACL", "SETUSER", "default", "-info").Err())
	}
	infos := &infoCounter{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), NewClient: func(o *redis.Options) *redis.Client {
		n := redis.NewClient(o)
		n.AddHook(infos)
		return n
	}})
	t.Cleanup(func() { _ = cc.Close() })
	var logged strings.Builder
	var mu sync.Mutex
	tr := newT(t, cc, Options{Log: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))})
	require.NoError(t, cc.Ping(ctx).Err())
	// The count starts before the watcher does: its first ask may come
	// before countWhile would have read the counter (seen in CI: 0 asks).
	before := infos.n.Load()
	done := tr.WatchSwitches()
	defer done()
	time.Sleep(2 * time.Second)
	n := infos.n.Load() - before
	assert.LessOrEqual(t, n, int64(3), "INFO asked again within refusedPause")
	assert.Positive(t, n)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, strings.Count(logged.String(), "refuses to say who it is"), logged.String())
}

// lockedWriter is a writer that w's mutex guards.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// On a Sentinel failover client a planned failover is told as soon as
// go-redis moves (it closes its connections to the old primary when a
// Sentinel announces the new one), not at the watcher's next round: here
// the rounds are an hour apart.
func TestSwitchLearnedWhenGoRedisMoves(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	_, replica, s, rdb := failoverGroup(t)
	infos := &infoCounter{}
	rdb.AddHook(infos)
	tr := newT(t, rdb, Options{})
	tr.sw.every = time.Hour
	col := newCollector()
	tr.OnSwitch(col.f)
	done := tr.WatchSwitches()
	defer done()
	for end := time.Now().Add(2 * time.Second); infos.n.Load() == 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int64(1), infos.n.Load(), "one round, the first")

	switched, addr := s.Failover(t)
	require.Equal(t, replica.Addr(), addr)
	lag := watchLag(t)
	sw := col.next(t, 500*time.Millisecond, lag)
	t.Logf("told %v after +switch-master: %+v", time.Since(switched), sw)
	assert.Equal(t, "replid", sw.Cause)
}
