package transport

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The engine against go-redis's paths for the lock script: alone (one
// goroutine) and under 4, 16 and 64 goroutines, on a single node and on a
// 3-master Cluster. "engine" is Transport.Do; "goredis-pooled" is
// EVALSHA on go-redis's pool (what bsm/redislock does); "goredis-fd" is
// go-redis's full-duplex auto-pipeline (redisync's former path).
//
//	go test -run '^$' -bench Engine -benchmem ./internal/transport/

func BenchmarkEngine(b *testing.B) {
	bench := func(b *testing.B, rdb redis.UniversalClient) {
		tr := New(rdb, Options{})
		b.Cleanup(func() { tr.Close(); tr.Drain(5e9) })
		ctx := context.Background()
		if err := lua.Lock.Load(ctx, rdb).Err(); err != nil && !redis.HasErrorPrefix(err, "CROSSSLOT") {
			b.Fatal(err)
		}
		type fullDuplex interface {
			AsyncAutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
		}
		ap, err := rdb.(fullDuplex).AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
		if err != nil {
			b.Fatal(err)
		}
		ways := []struct {
			name string
			do   func(key string) error
		}{
			{"engine", func(key string) error {
				return tr.Do(ctx, Call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "b:owner", 0}}, nil).Err()
			}},
			{"goredis-pooled", func(key string) error {
				return rdb.EvalSha(ctx, lua.Lock.Hash(), []string{key}, 30000, "b:owner", 0).Err()
			}},
			{"goredis-fd", func(key string) error {
				cmd := redis.NewCmd(ctx, "evalsha", lua.Lock.Hash(), 1, key, 30000, "b:owner", 0)
				f := ap.Submit(ctx, cmd)
				_ = f.WaitContext(ctx)
				return cmd.Err()
			}},
		}
		for _, w := range ways {
			for _, g := range []int{1, 4, 16, 64} {
				b.Run(w.name+"/g"+strconv.Itoa(g), func(b *testing.B) {
					// Warm: every node's script cache and connections.
					for i := range 64 {
						if err := w.do("b:warm:" + strconv.Itoa(i)); err != nil {
							b.Fatal(err)
						}
					}
					var next atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					for i := range g {
						wg.Add(1)
						go func() {
							defer wg.Done()
							key := "b:" + strconv.Itoa(i)
							for next.Add(1) <= int64(b.N) {
								if err := w.do(key); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
				})
			}
		}
	}
	b.Run("node", func(b *testing.B) {
		srv := redistest.Start(b)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128})
		b.Cleanup(func() { _ = rdb.Close() })
		bench(b, rdb)
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.StartCluster(b, 3)
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 128})
		b.Cleanup(func() { _ = cc.Close() })
		if err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return lua.Lock.Load(ctx, c).Err()
		}); err != nil {
			b.Fatal(err)
		}
		bench(b, cc)
	})
}

// BenchmarkEngineConns measures the engine's lock script under 4, 16 and
// 64 goroutines with 1, 2 and 4 shared connections per node.
func BenchmarkEngineConns(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	_ = lua.Lock.Load(ctx, rdb).Err()
	for _, conns := range []int{1, 2, 4} {
		for _, g := range []int{4, 16, 64} {
			b.Run("conns"+strconv.Itoa(conns)+"/g"+strconv.Itoa(g), func(b *testing.B) {
				nodeConns = conns
				defer func() { nodeConns = nodeConnsDefault }()
				tr := New(rdb, Options{})
				defer func() { tr.Close(); tr.Drain(5e9) }()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for i := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := "b:" + strconv.Itoa(i)
						for next.Add(1) <= int64(b.N) {
							if err := tr.Do(ctx, Call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "b:owner", 0}}, nil).Err(); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}
