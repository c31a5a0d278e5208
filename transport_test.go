package redisync

import (
	"context"
	"strconv"
	"strings"
	"sync"
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
// internal/transport): the user's hooks (WithHooks) see every command of
// every primitive.

// trLock is the lock script's call taking key for a new owner.
func trLock(key string) call {
	return call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "tr:owner", 0}, Takes: true}
}

// onKey matches the script commands whose first key is key.
func onKey(key string) func([]any) bool {
	return func(args []any) bool { return len(args) > 3 && args[3] == key }
}

// The user's hooks see every command redisync sends: what a hook counts
// is what Redis ran (acquisitions, re-entries, releases, renewals, a
// latch's read), on a single node and on a Cluster, with the hook given to
// WithHooks for redisync's own calls (one hook for every node) and on the
// redis client (every node's client on a Cluster: ClusterClient.OnNewNode,
// as redisotel installs its hooks) for the commands that stay on go-redis:
// calls sent alone, batches, and WithReplicaAck's calls.
func TestTransportHooksSeeEveryCommand(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting

	// Renewed every 667ms: beside busy loops a 600ms lease (renewed every
	// 200ms) was lost on a Cluster, which is not what this test is about.
	const lease = 2 * time.Second
	workload := func(t *testing.T, rdb redis.UniversalClient, opts ...Option) {
		var renewed atomic.Int64
		opts = append(opts, WithWatchdogTimeout(lease), WithObserver(&Observer{Renewed: func(RenewalEvent) { renewed.Add(1) }}))
		c := newClient(t, rdb, opts...)
		bg := context.Background()
		held, err := c.Mutex("tr:hook:held").Lock(bg)
		require.NoError(t, err)
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
			_, err = c.CountDownLatch("tr:hook:latch").Count(bg)
			require.NoError(t, err)
		}
		eventually(t, 10*lease, "two renewals", func() bool { return renewed.Load() >= 2 })
		require.NoError(t, c.Mutex("tr:hook:held").Unlock(held))
	}
	ran := func(t *testing.T, nodes ...*redistest.Server) map[string]int64 {
		n := map[string]int64{}
		for _, srv := range nodes {
			info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
			require.NoError(t, err)
			for _, line := range strings.Split(info, "\r\n") {
				for _, name := range []string{"evalsha", "eval", "get"} {
					if !strings.HasPrefix(line, "cmdstat_"+name+":") {
						continue
					}
					// Every command Redis got: run (calls, which
					// counts those that failed running too) or
					// refused before running (NOSCRIPT, CLUSTERDOWN, a
					// redirect).
					for _, kv := range strings.Split(line[strings.Index(line, ":")+1:], ",") {
						k, v, _ := strings.Cut(kv, "=")
						if k == "calls" || k == "rejected_calls" {
							c, err := strconv.ParseInt(v, 10, 64)
							require.NoError(t, err)
							n[name] += c
						}
					}
				}
			}
		}
		return n
	}
	// check compares what seen saw with what nodes ran since before
	// (what the test's setup ran there).
	check := func(t *testing.T, seen *namesHook, before map[string]int64, nodes ...*redistest.Server) {
		r := ran(t, nodes...)
		for name, n := range before {
			r[name] -= n
		}
		// Every command Redis got was seen; a hook may also see a
		// command that never reached Redis (its caller left before it
		// was written, its connection failed), a few of them.
		got, saw := r["evalsha"]+r["eval"], seen.count("evalsha")+seen.count("eval")
		assert.LessOrEqual(t, got, saw, "scripts")
		assert.LessOrEqual(t, saw, got+got/20, "scripts")
		assert.Equal(t, r["get"], seen.count("get"), "other commands")
		assert.NotZero(t, r["get"])
	}
	t.Run("single node", func(t *testing.T) {
		e := realEnv(t)
		seen := &namesHook{}
		rdb := e.rdb(t)
		gate(rdb, seen)
		before := ran(t, e.srv)
		workload(t, rdb)
		check(t, seen, before, e.srv)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistestCluster(t)
		seen := &namesHook{}
		cc := cl.Client(t)
		gate(cc, seen)
		before := ran(t, cl.Masters...)
		workload(t, cc)
		check(t, seen, before, cl.Masters...)
	})
	t.Run("cluster with replica ack", func(t *testing.T) {
		rc := redistest.StartClusterWithReplicas(t, 3, 1)
		seen := &namesHook{}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = cc.Close() })
		gate(cc, seen)
		before := ran(t, rc.Masters...)
		workload(t, cc, WithReplicaAck(1, time.Second))
		check(t, seen, before, rc.Masters...)
	})
}

// namesHook counts the commands it sees, by name, alone and in pipelines.
type namesHook struct {
	mu sync.Mutex
	n  map[string]int64
}

func (h *namesHook) add(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int64{}
	}
	h.n[cmd.Name()]++
}

func (h *namesHook) count(name string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

func (h *namesHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *namesHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *namesHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.add(cmd)
		}
		return next(ctx, cmds)
	}
}
