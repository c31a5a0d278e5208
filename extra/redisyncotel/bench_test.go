package redisyncotel_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
	"github.com/redisync-go/redisync/internal/redistest"
)

// The uncontended Mutex pair of the core's BenchmarkUncontendedPair with
// an Observer of this package (issue 45): on the global providers, which
// are no-ops until an SDK is installed (noop), and on an SDK's, sampling
// every span and recording every metric (sdk). Allocations per pair with
// -benchmem:
//
//	go test -run '^$' -bench UncontendedPairObserved -benchmem .
func BenchmarkUncontendedPairObserved(b *testing.B) {
	srv := redistest.Start(b)
	b.Run("noop", func(b *testing.B) { benchObserved(b, srv.Addr(), redisyncotel.NewObserver()) })
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
		benchObserved(b, srv.Addr(), redisyncotel.NewObserver(redisyncotel.WithTracerProvider(tp), redisyncotel.WithMeterProvider(mp)))
	})
}

func benchObserved(b *testing.B, addr string, obs *redisync.Observer) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = rdb.Close() })
	c, err := redisync.New(rdb, redisync.WithObserver(obs))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("bench:observed")
	ctx := context.Background()
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
