package redistest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

func TestStartAndRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	port := s.Port()

	s.Restart(t)
	require.Equal(t, port, s.Port())
	require.Equal(t, fmt.Sprintf("127.0.0.1:%d", port), s.Addr())
	require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "restart should start with an empty dataset")

	s.Kill()
	_, err := net.Dial("tcp", s.Addr())
	require.Error(t, err, "killed server should refuse connections")
	s.Restart(t)
	require.NoError(t, c.Ping(ctx).Err())
	s.Stop()
	s.Stop() // idempotent
}

func TestRestartLoading(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t, redistest.SlowLoading(500*time.Microsecond)...)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	loading := make(chan error, 1)
	go func() {
		// Ask while the server loads: LOADING.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err := c.Get(ctx, "k").Err(); err != nil && strings.HasPrefix(err.Error(), "LOADING") {
				loading <- err
				return
			}
		}
		loading <- nil
	}()
	start := time.Now()
	s.RestartLoading(t, 2000)
	took := time.Since(start)
	require.Error(t, <-loading, "the server answered LOADING while it loaded")
	require.Greater(t, took, 500*time.Millisecond, "2000 keys at 500µs take a second to load")
	require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "the data before the restart is lost")
	n, err := c.Keys(ctx, redistest.LoadingKeys).Result()
	require.NoError(t, err)
	require.Len(t, n, 2000)
	entries, err := os.ReadDir(s.Dir())
	require.NoError(t, err)
	for _, e := range entries {
		require.NotEqual(t, "dump.rdb", e.Name(), "the dump is gone: a plain Restart loads nothing")
	}
}

func TestExtraArgs(t *testing.T) {
	c := redistest.Start(t, "--maxmemory", "12345678").Client(t)
	got, err := c.ConfigGet(context.Background(), "maxmemory").Result()
	require.NoError(t, err)
	require.Equal(t, "12345678", got["maxmemory"])
}

func TestReplica(t *testing.T) {
	ctx := context.Background()
	m := redistest.Start(t)
	r := redistest.StartReplica(t, m)
	require.NoError(t, m.Client(t).Set(ctx, "k", "v", 0).Err())
	rc := r.Client(t)
	require.Eventually(t, func() bool { return rc.Get(ctx, "k").Val() == "v" }, 5*time.Second, 20*time.Millisecond)
}

func TestCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 0)
	require.Len(t, cl.Addrs(), 3)
	c := cl.Client(t)
	slots := map[int64]bool{}
	for i := range 20 {
		k := fmt.Sprintf("key-%d", i)
		require.NoError(t, c.Set(ctx, k, i, 0).Err())
		slot, err := c.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		slots[slot/5462] = true // which third of the slot space
	}
	require.Len(t, slots, 3, "keys should land on all three masters")
	for i := range 20 {
		require.Equal(t, fmt.Sprint(i), c.Get(ctx, fmt.Sprintf("key-%d", i)).Val())
	}
	// Every master owns some of the keys.
	for _, m := range cl.Masters {
		n, err := m.Client(t).DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, n, "master %s has no keys", m.Addr())
	}
}

func TestSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	s := redistest.StartSentinel(t, master, "mymaster", 1)
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Addr()}})
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	master.Kill()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	want := fmt.Sprint(replica.Port())
	require.Eventually(t, func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		return err == nil && addr[1] == want
	}, 15*time.Second, 50*time.Millisecond, "failover to the replica")
	require.Eventually(t, func() bool { return rdb.Set(ctx, "k2", "v", 0).Err() == nil }, 5*time.Second, 50*time.Millisecond)
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	s.Resume() // not paused: nothing happens
	require.NoError(t, c.Ping(ctx).Err())

	s.Pause()
	s.Pause() // already paused: nothing happens
	start := time.Now()
	err := c.Get(ctx, "k").Err()
	require.Error(t, err, "a paused server answers nothing")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "a paused server keeps the connection open: %v", err)
	require.Less(t, time.Since(start), 2*time.Second)

	s.Resume()
	require.Eventually(t, func() bool { return c.Get(ctx, "k").Val() == "v" }, 5*time.Second, 20*time.Millisecond,
		"the data survives a pause")

	// Stop and Kill work on a paused server, and do not hang.
	s.Pause()
	start = time.Now()
	s.Stop()
	require.Less(t, time.Since(start), 2*time.Second, "a paused server is resumed to handle SIGTERM")
	_, err = net.Dial("tcp", s.Addr())
	require.Error(t, err, "stopped server should refuse connections")
	s.Resume() // stopped: nothing happens

	s.Restart(t)
	require.NoError(t, c.Ping(ctx).Err())
	s.Pause()
	s.Kill()
	_, err = net.Dial("tcp", s.Addr())
	require.Error(t, err, "killed server should refuse connections")
}

func TestPausedServerCleanedUp(t *testing.T) {
	var addr string
	start := time.Now()
	t.Run("paused", func(t *testing.T) {
		s := redistest.Start(t)
		addr = s.Addr()
		s.Pause() // left paused for the test's cleanup
	})
	require.Less(t, time.Since(start), 5*time.Second, "cleanup of a paused server does not wait for SIGKILL")
	_, err := net.Dial("tcp", addr)
	require.Error(t, err, "the paused server was stopped when its test ended")
}

func TestLasting(t *testing.T) {
	ctx := context.Background()
	l := redistest.NewLasting("shared")
	var s *redistest.Server
	require.NoError(t, l.Do(func() { s = redistest.Start(l) }))
	t.Run("a test using it", func(t *testing.T) {
		require.NoError(t, s.Client(t).Set(ctx, "k", "v", 0).Err())
	})
	require.Equal(t, "v", s.Client(t).Get(ctx, "k").Val(), "it outlives the test that used it")
	l.Close()
	require.Error(t, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1}).Ping(ctx).Err(), "Close stops it")

	err := l.Do(func() { l.Fatalf("boom %d", 1) })
	require.ErrorContains(t, err, "shared: boom 1")
	require.NotErrorIs(t, err, redistest.ErrSkipped)
	require.ErrorIs(t, l.Do(func() { l.Skip("no redis") }), redistest.ErrSkipped)
}
