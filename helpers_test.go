package redisync

import (
	"context"
	"errors"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// testEnv is one Redis the tests run against: an embedded miniredis or a
// private real redis-server started for the test.
type testEnv struct {
	name string
	addr string
	mr   *miniredis.Miniredis // nil for a real server
	srv  *redistest.Server    // nil for miniredis
}

// real reports whether the environment is a real redis-server.
func (e *testEnv) real() bool { return e.srv != nil }

// forEachEnv runs fn as a subtest against miniredis and a real
// redis-server, the two in parallel (each has its own server).
func forEachEnv(t *testing.T, fn func(t *testing.T, e *testEnv)) {
	t.Helper()
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) { t.Parallel(); fn(t, miniEnv(t)) })
	t.Run("redis", func(t *testing.T) { t.Parallel(); fn(t, realEnv(t)) })
}

// forEachEnvSerial is forEachEnv one environment after the other, for a
// test that counts the process's goroutines.
func forEachEnvSerial(t *testing.T, fn func(t *testing.T, e *testEnv)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) { fn(t, miniEnv(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, realEnv(t)) })
}

func miniEnv(t *testing.T) *testEnv {
	mr := miniredis.RunT(t)
	return &testEnv{name: "miniredis", addr: mr.Addr(), mr: mr}
}

// realEnv starts a private redis-server (skipped when none is installed,
// unless REDISYNC_REQUIRE_REDIS=1).
func realEnv(t *testing.T) *testEnv {
	srv := redistest.Start(t)
	return &testEnv{name: "redis", addr: srv.Addr(), srv: srv}
}

// rdb returns a new go-redis client, closed when the test ends.
func (e *testEnv) rdb(t testing.TB) *redis.Client {
	return newRDB(t, e.addr)
}

func newRDB(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// client returns a Client on its own connection pool (like another process),
// closed when the test ends.
func (e *testEnv) client(t testing.TB, opts ...Option) *Client {
	return newClient(t, e.rdb(t), opts...)
}

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...Option) *Client {
	if hs := gatedHooks(rdb); len(hs) > 0 {
		// The fault hooks gate added to rdb: on redisync's own calls too.
		opts = append([]Option{WithHooks(hs...)}, opts...)
	}
	c, err := New(rdb, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keys lists every key in the environment's Redis, sorted.
func (e *testEnv) keys(t testing.TB) []string {
	ks, err := e.rdb(t).Keys(context.Background(), "*").Result()
	require.NoError(t, err)
	sort.Strings(ks)
	return ks
}

// eventually fails the test unless cond holds within d, plus the
// scheduling delay the machine showed meanwhile (lagWatch: a busy machine
// delays what cond waits for by as much).
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	lag := startLag()
	defer lag.Stop()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d+lag.Slack() {
			t.Fatalf("timed out after %v waiting for %s (the machine's worst delay meanwhile: %v)", time.Since(start), what, lag.Worst())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// redisyncGoroutines counts the goroutines running the library's code
// (see libraryGoroutines).
func redisyncGoroutines() int { return len(libraryGoroutines()) }

func newProxy(t *testing.T, target string) *faultproxy.Proxy { return faultproxy.New(t, target) }

// healProxy ends a partition and cuts the connections it left hanging, so
// that what still reads on them (a renewal) fails at once instead of
// after its read timeout: a test's Close then does not wait for it.
func healProxy(p *faultproxy.Proxy) {
	p.Blackhole(false)
	p.CutAll()
}

func redistestReplica(t *testing.T, e *testEnv) *redistest.Server {
	return redistest.StartReplica(t, e.srv)
}

func redistestCluster(t *testing.T) *redistest.Cluster { return redistest.StartCluster(t, 3) }

// lasting owns the servers that several tests share; TestMain stops them.
var lasting = redistest.NewLasting("servers shared by tests")

func TestMain(m *testing.M) {
	code := m.Run()
	lasting.Close()
	os.Exit(code)
}

var shared struct {
	once sync.Once
	cl   *redistest.Cluster
	err  error
}

// sharedCluster returns a 3-master cluster shared by the tests that leave
// it as they found it (no pause, no kill, no configuration left changed),
// with every key deleted: one cluster started once instead of one per
// test. The tests that use it do not run in parallel.
func sharedCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.err = lasting.Do(func() { shared.cl = redistest.StartCluster(lasting, 3) })
	})
	switch {
	case errors.Is(shared.err, redistest.ErrSkipped):
		t.Skip(shared.err)
	case shared.err != nil:
		t.Fatal(shared.err)
	}
	ctx := context.Background()
	for _, m := range shared.cl.Masters {
		require.NoError(t, m.Client(t).FlushAll(ctx).Err())
	}
	return shared.cl
}

func redistestStart(tb testing.TB) string { return redistest.Start(tb).Addr() }

func redistestSentinel(t *testing.T, e *testEnv, replicas int) *redistest.Sentinel {
	return redistest.StartSentinel(t, e.srv, "redisync", replicas)
}

// localWaiters counts the goroutines of c waiting on channel.
func localWaiters(c *Client, channel string) int {
	ch, _ := c.ps.Channel(channel)
	return ch.Waiters
}

// lagWatch measures this machine's scheduling delay while a test's timed
// section runs (redistest.Lag): a wall-clock bound adds its Slack.
type lagWatch = redistest.Lag

// watchLag starts a lagWatch, stopped when the test ends (or by Stop).
func watchLag(t testing.TB) *lagWatch { return redistest.WatchLag(t) }

// startLag starts a lagWatch that only Stop stops.
func startLag() *lagWatch { return redistest.StartLag() }

// rwHeld reports, from Holders, how many read holds r has and whether it
// has a write hold.
func rwHeld(ctx context.Context, r *RWMutex) (readers int, write bool, err error) {
	hs, err := r.Holders(ctx)
	for _, h := range hs {
		if h.Write {
			write = true
		} else {
			readers++
		}
	}
	return readers, write, err
}

// rwReaders returns how many read holds r has (see rwHeld).
func rwReaders(ctx context.Context, r *RWMutex) (int, error) {
	n, _, err := rwHeld(ctx, r)
	return n, err
}

// rivalTakes starts take, a rival's waiting acquisition of what hold's
// holder holds (bounded by within), and returns a function that waits for
// it and returns the holder's hold.Err() read the moment take returned
// (take's own error fails the test). A lease's promise, that its holder is
// told before Redis frees it for anyone else, is then an order: nil there
// means the rival had it while the holder's context was live. A busy
// machine delays both sides, never that order; on a quiet one the rival
// takes it within a millisecond or two of Redis freeing it, so a holder
// told late is caught.
func rivalTakes(t testing.TB, hold context.Context, within time.Duration, take func(context.Context) (release func() error, err error)) func() error {
	t.Helper()
	type got struct{ held, err error }
	ch := make(chan got, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		release, err := take(ctx)
		held := hold.Err() // first: the order is the check
		if err == nil {
			err = release()
		}
		ch <- got{held, err}
	}()
	return func() error {
		t.Helper()
		g := <-ch
		require.NoError(t, g.err, "the rival's acquisition")
		return g.held
	}
}

// heldReplies holds back the replies of the commands a hook rule gives
// faultproxy.HoldReply(h.ch), until free: a test can then ask that a call
// returns while they are held (an order), not within some milliseconds.
type heldReplies struct {
	ch   chan struct{}
	once sync.Once
}

// holdReplies returns a heldReplies, freed when the test ends.
func holdReplies(t testing.TB) *heldReplies {
	h := &heldReplies{ch: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

func (h *heldReplies) free() { h.once.Do(func() { close(h.ch) }) }

// heldLiveness is how long whileHeld waits for a call that must not wait
// for a held reply: far past what such a call takes on a busy machine,
// finite only so that a broken one fails rather than hangs.
const heldLiveness = 10 * time.Second

// whileHeld runs f, which must return while h's replies are held (not
// wait for them), and fails the test with what otherwise.
func (h *heldReplies) whileHeld(t testing.TB, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		select {
		case <-h.ch:
			t.Errorf("%s: it returned after the held reply was released", what)
		default:
		}
		return
	case <-time.After(heldLiveness):
	}
	h.free()
	<-done
	t.Errorf("%s: it waited for the held reply (%v)", what, heldLiveness)
}

// recvWithin receives from ch, waiting at most d from start plus the
// scheduling delay lag has seen by then (Slack, which only grows): a
// liveness or promptness bound that a busy machine does not break by
// itself. ok is false if nothing came.
func recvWithin[T any](lag *lagWatch, start time.Time, d time.Duration, ch <-chan T) (v T, ok bool) {
	for {
		left := time.Until(start.Add(d + lag.Slack()))
		if left <= 0 {
			return v, false
		}
		select {
		case v = <-ch:
			return v, true
		case <-time.After(left):
		}
	}
}

// crashableRDB returns a go-redis client that reaches addr through a proxy
// of its own, and crash, which ends it as a dying process would: the proxy
// closes (every connection, go-redis's and redisync's engine's, and any new
// one is refused), then the client. Closing the client alone is no crash:
// the engine's own connections serve a call made before it next looks
// whether the client closed (up to 100ms on).
func crashableRDB(t testing.TB, addr string) (rdb *redis.Client, crash func()) {
	px := faultproxy.New(t, addr)
	rdb = redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, func() {
		px.Close()
		require.NoError(t, rdb.Close())
	}
}

// realTimeTTL makes mr's keys expire in real time, as Redis's do, until
// the test ends: its clock is moved on between commands every few
// milliseconds. (miniredis's own ClockTTL moves it on at every access,
// within a script too, so a key could expire between two calls of one
// script, which Redis, whose time stands still during a script, never
// does: seen as WRONGTYPE, or a semaphore with no permits set, under
// load.)
func realTimeTTL(t testing.TB, mr *miniredis.Miniredis) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}
