package redisync

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The transport as the primitives use it (its own tests are in
// internal/transport): the user's hooks see every command of every
// primitive.

// trLock is the lock script's call taking key for a new owner.
func trLock(key string) call {
	return call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "tr:owner", 0}, Takes: true}
}

// onKey matches the script commands whose first key is key.
func onKey(key string) func([]any) bool {
	return func(args []any) bool { return len(args) > 3 && args[3] == key }
}

// The user's hooks see every command redisync sends: what a hook on the
// redis client counts is what Redis ran, on a single node and, through
// the cluster client, on a Cluster.
func TestTransportHooksSeeEveryCommand(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	workload := func(t *testing.T, c *Client) {
		bg := context.Background()
		for i := range 20 {
			m := c.Mutex("tr:hook:" + strconv.Itoa(i%5))
			lctx, err := m.Lock(bg)
			require.NoError(t, err)
			lctx, err = m.Lock(lctx)
			require.NoError(t, err)
			require.NoError(t, m.Unlock(lctx))
			require.NoError(t, m.Unlock(lctx))
			f := c.FairMutex("tr:hook:f")
			fctx, err := f.Lock(bg)
			require.NoError(t, err)
			require.NoError(t, f.Unlock(fctx))
		}
	}
	scriptsRun := func(t *testing.T, rdb *redis.Client) int64 {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		var n int64
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				f := strings.SplitN(strings.TrimPrefix(line[strings.Index(line, ":")+1:], "calls="), ",", 2)
				v, err := strconv.ParseInt(f[0], 10, 64)
				require.NoError(t, err)
				n += v
			}
		}
		return n
	}
	t.Run("single node", func(t *testing.T) {
		e := realEnv(t)
		var seen atomic.Int64
		rdb := e.rdb(t)
		rdb.AddHook(countHook{n: &seen})
		workload(t, newClient(t, rdb))
		assert.Equal(t, scriptsRun(t, e.rdb(t)), seen.Load())
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistestCluster(t)
		var seen atomic.Int64
		cc := cl.Client(t)
		cc.AddHook(countHook{n: &seen})
		workload(t, newClient(t, cc))
		var ran int64
		for _, m := range cl.Masters {
			ran += scriptsRun(t, m.Client(t))
		}
		assert.Equal(t, ran, seen.Load())
	})
	t.Run("cluster with replica ack", func(t *testing.T) {
		// The scripts go on each master's own client (WAIT answers for
		// the writes of its connection): a hook on every node, as
		// redisotel adds one, sees them all.
		rc := redistest.StartClusterWithReplicas(t, 3, 1)
		var seen atomic.Int64
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = cc.Close() })
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(countHook{n: &seen}) })
		workload(t, newClient(t, cc, WithReplicaAck(1, time.Second)))
		var ran int64
		for _, m := range rc.Masters {
			ran += scriptsRun(t, m.Client(t))
		}
		assert.Equal(t, ran, seen.Load())
	})
}
