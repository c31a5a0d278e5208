package redisync

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// One goroutine's uncontended Lock+Unlock pair on loopback (issue 34), next
// to the floor it is measured against: EVALSHA of the same two scripts on a
// pooled go-redis client, in the same run, on the same server:
//
//	go test -run '^$' -bench UncontendedPair -benchmem -count 5 .
func BenchmarkUncontendedPair(b *testing.B) {
	b.Run("node", func(b *testing.B) {
		addr := redistestStart(b)
		b.Run("redisync", func(b *testing.B) { benchPair(b, newRDB(b, addr), context.Background()) })
		b.Run("raw-pooled", func(b *testing.B) { benchRawPair(b, newRDB(b, addr)) })
		b.Run("raw-fd", func(b *testing.B) { benchRawFDPair(b, newRDB(b, addr)) })
		// The benchmark harness's shape (bench/): a context that can end,
		// and a hook on the redis client counting its commands, as
		// instrumentation installs one.
		b.Run("hooked/redisync", func(b *testing.B) { benchPair(b, hooked(newRDB(b, addr)), cancellable(b)) })
		b.Run("hooked/raw-pooled", func(b *testing.B) { benchRawPair(b, hooked(newRDB(b, addr))) })
		b.Run("hooked/raw-fd", func(b *testing.B) { benchRawFDPair(b, hooked(newRDB(b, addr))) })
		b.Run("hooked/raw-halfduplex", func(b *testing.B) {
			benchRawAPPair(b, hooked(newRDB(b, addr)), &redis.AutoPipelineOptions{})
		})
		b.Run("hooked/raw-aside", func(b *testing.B) { benchRawAsidePair(b, hooked(newRDB(b, addr))) })
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.StartCluster(b, 3)
		b.Run("redisync", func(b *testing.B) { benchPair(b, cl.Client(b), context.Background()) })
		b.Run("raw-pooled", func(b *testing.B) { benchRawPair(b, cl.Client(b)) })
	})
}

// benchHook counts the commands of a redis client, as the benchmark
// harness's hook (and metrics instrumentation) does.
type benchHook struct{ n atomic.Int64 }

func (h *benchHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *benchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *benchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func hooked(rdb *redis.Client) *redis.Client {
	rdb.AddHook(&benchHook{})
	return rdb
}

func cancellable(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

func benchPair(b *testing.B, rdb redis.UniversalClient, ctx context.Context) {
	m := newClient(b, rdb).Mutex("bench:pair")
	for b.Loop() {
		hctx, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(hctx); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRawPair runs lock.lua and unlock.lua with the arguments a first hold
// and its last release send, one EVALSHA each on the pooled client.
func benchRawPair(b *testing.B, rdb redis.UniversalClient) {
	ctx := context.Background()
	keys := []string{"{bench:pair}:raw"}
	for _, s := range []*lua.Script{lua.Lock, lua.Unlock} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		r, err := lua.Lock.EvalSha(ctx, rdb, keys, 30000, "owner:1", 0).Int()
		if err != nil || r != 1 {
			b.Fatal(r, err)
		}
		n, err := lua.Unlock.EvalSha(ctx, rdb, keys, "owner:1", 1, 30000, "publish", "0", "redisync_lock__channel:{bench:pair}:raw", "").Int()
		if err != nil || n != 2 {
			b.Fatal(n, err)
		}
	}
}

// benchRawFDPair is benchRawPair on go-redis's full-duplex auto-pipeline,
// the engine redisync's single-node calls go on: what its goroutine
// hand-offs (writer, reader, caller) cost next to a pooled connection.
func benchRawFDPair(b *testing.B, rdb *redis.Client) {
	benchRawAPPair(b, rdb, &redis.AutoPipelineOptions{FullDuplex: true})
}

// benchRawAPPair is benchRawPair on a go-redis auto-pipeline with opt.
func benchRawAPPair(b *testing.B, rdb *redis.Client, opt *redis.AutoPipelineOptions) {
	ctx := context.Background()
	ap, err := rdb.AsyncAutoPipelineWithOptions(opt)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []*lua.Script{lua.Lock, lua.Unlock} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	do := func(args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		if err := ap.Submit(ctx, cmd).WaitContext(ctx); err != nil {
			b.Fatal(err)
		}
		return cmd
	}
	const key = "{bench:pair}:fd"
	for b.Loop() {
		r, err := do("evalsha", lua.Lock.Hash(), 1, key, 30000, "owner:1", 0).Int()
		if err != nil || r != 1 {
			b.Fatal(r, err)
		}
		n, err := do("evalsha", lua.Unlock.Hash(), 1, key, "owner:1", 1, 30000, "publish", "0", "redisync_lock__channel:{bench:pair}:fd", "").Int()
		if err != nil || n != 2 {
			b.Fatal(n, err)
		}
	}
}

// benchRawAsidePair is benchRawPair with each call made from a goroutine
// of its own while its caller waits for it or for its context, as a
// caller that can leave must: the floor of a pooled path that keeps the
// context promise.
func benchRawAsidePair(b *testing.B, rdb redis.UniversalClient) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := []string{"{bench:pair}:aside"}
	for _, s := range []*lua.Script{lua.Lock, lua.Unlock} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			b.Fatal(err)
		}
	}
	do := func(args ...any) *redis.Cmd {
		cmd := redis.NewCmd(ctx, args...)
		done := make(chan struct{})
		go func() {
			_ = rdb.Process(context.WithoutCancel(ctx), cmd)
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
		return cmd
	}
	for b.Loop() {
		r, err := do("evalsha", lua.Lock.Hash(), 1, keys[0], 30000, "owner:1", 0).Int()
		if err != nil || r != 1 {
			b.Fatal(r, err)
		}
		n, err := do("evalsha", lua.Unlock.Hash(), 1, keys[0], "owner:1", 1, 30000, "publish", "0", "redisync_lock__channel:{bench:pair}:aside", "").Int()
		if err != nil || n != 2 {
			b.Fatal(n, err)
		}
	}
}

// The uncontended pair of every lock that shares the Mutex's path
// (issue 45): a first hold and its last release, one goroutine, on one
// node, no Observer.
//
//	go test -run '^$' -bench UncontendedPrimitives -benchmem .
func BenchmarkUncontendedPrimitives(b *testing.B) {
	addr := redistestStart(b)
	bg := context.Background()
	pair := func(b *testing.B, lock func(context.Context) (context.Context, error), unlock func(context.Context) error) {
		for b.Loop() {
			hctx, err := lock(bg)
			if err != nil {
				b.Fatal(err)
			}
			if err := unlock(hctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("fair", func(b *testing.B) {
		f := newClient(b, newRDB(b, addr)).FairMutex("bench:fair")
		pair(b, f.Lock, f.Unlock)
	})
	b.Run("rw-write", func(b *testing.B) {
		rw := newClient(b, newRDB(b, addr)).RWMutex("bench:rw-w")
		pair(b, rw.Lock, rw.Unlock)
	})
	b.Run("rw-read", func(b *testing.B) {
		rw := newClient(b, newRDB(b, addr)).RWMutex("bench:rw-r")
		pair(b, rw.RLock, rw.RUnlock)
	})
	b.Run("semaphore", func(b *testing.B) {
		s := newClient(b, newRDB(b, addr)).Semaphore("bench:sem")
		if err := s.SetPermits(bg, 1); err != nil {
			b.Fatal(err)
		}
		pair(b, func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 1) },
			func(ctx context.Context) error { return s.Release(ctx, 1) })
	})
}
