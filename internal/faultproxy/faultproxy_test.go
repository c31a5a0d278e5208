package faultproxy_test

import (
	"context"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestBlackhole(t *testing.T) {
	ctx := context.Background()
	p := faultproxy.New(t, redistest.Start(t).Addr())
	c := newClient(t, p.Addr())
	require.NoError(t, c.Ping(ctx).Err())

	p.Blackhole(true)
	start := time.Now()
	err := c.Ping(ctx).Err() // on the pooled connection
	require.Error(t, err)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Error(t, newClient(t, p.Addr()).Ping(ctx).Err(), "new connections are partitioned too")

	p.Blackhole(false)
	require.NoError(t, c.Ping(ctx).Err())
	require.NoError(t, newClient(t, p.Addr()).Ping(ctx).Err())
}

func TestCutAll(t *testing.T) {
	ctx := context.Background()
	p := faultproxy.New(t, redistest.Start(t).Addr())
	c := newClient(t, p.Addr())
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, 1, p.ActiveConns())

	p.CutAll()
	require.Eventually(t, func() bool { return p.ActiveConns() == 0 }, 2*time.Second, 5*time.Millisecond)
	// The pooled connection is dead: go-redis either reports an error or
	// notices and redials; either way the next commands work again.
	_ = c.Get(ctx, "k").Err()
	require.Equal(t, "v", c.Get(ctx, "k").Val())
	require.Equal(t, 1, p.ActiveConns())
}

func TestRetarget(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Start(t), redistest.Start(t)
	require.NoError(t, a.Client(t).Set(ctx, "k", "a", 0).Err())
	require.NoError(t, b.Client(t).Set(ctx, "k", "b", 0).Err())
	p := faultproxy.New(t, a.Addr())
	c := newClient(t, p.Addr())
	require.Equal(t, "a", c.Get(ctx, "k").Val())

	p.Retarget(b.Addr())
	require.Equal(t, b.Addr(), p.Target())
	require.Equal(t, "a", c.Get(ctx, "k").Val(), "an open connection stays with the old target")
	require.Equal(t, "b", newClient(t, p.Addr()).Get(ctx, "k").Val(), "a new connection goes to the new target")
	p.CutAll()
	_ = c.Get(ctx, "k").Err() // the pooled connection is dead
	require.Equal(t, "b", c.Get(ctx, "k").Val(), "after CutAll the client reconnects to the new target")
}

func TestCloseEndsEverything(t *testing.T) {
	srv := redistest.Start(t)
	before := runtime.NumGoroutine()
	p := faultproxy.New(t, srv.Addr())
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", p.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return p.ActiveConns() == 5 }, 2*time.Second, 5*time.Millisecond)
	p.Blackhole(true)
	_, _ = conns[0].Write([]byte("PING\r\n"))

	p.Close()
	p.Close() // idempotent
	require.Equal(t, 0, p.ActiveConns())
	// Poll by hand: testify's Eventually runs extra goroutines itself.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines leaked: before=%d now=%d\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(time.Second))
	_, err := conns[0].Read(make([]byte, 1))
	require.Error(t, err, "client side should be closed")
	require.False(t, isTimeout(err), "client side should be closed, not hanging")
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "listener should be closed")
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestRefuse(t *testing.T) {
	ctx := context.Background()
	p := faultproxy.New(t, redistest.Start(t).Addr())
	c := newClient(t, p.Addr())
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	p.Refuse(t, true)
	require.Eventually(t, func() bool { return p.ActiveConns() == 0 }, 2*time.Second, 5*time.Millisecond)
	_ = c.Get(ctx, "k").Err() // the pooled connection, closed
	err := c.Get(ctx, "k").Err()
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	require.Equal(t, "dial", op.Op, "%v", err)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)

	p.Refuse(t, false)
	// go-redis's pool, once its dials failed, probes once a second.
	require.Eventually(t, func() bool { return c.Get(ctx, "k").Val() == "v" }, 3*time.Second, 10*time.Millisecond,
		"on the same address again")
	require.Equal(t, 1, p.ActiveConns())
}
