package redisyncotel_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
	"github.com/redisync-go/redisync/internal/redistest"
)

// The commands redisync sends on its own, as docs/observing.md lists them,
// are root spans: the watchdog's renewal batches (every third of the
// lease, in NewHook's spans on redisync's own calls) and, once a hold was
// released, the INFO replication with which the Client watches for a
// failover (every 250ms per primary, for a lease, in go-redis's tracing
// on the client). ExampleNewObserver's sampler (skipBackground) drops
// them, and keeps the calls' spans, under the lock's spans.
func TestBackgroundCommandsAreRootSpans(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// run holds a lock until the watchdog has sent two renewal pipelines,
	// releases it and waits until the Client has sent INFO twice (each
	// within 5s), and returns the command spans that start a trace (by
	// name) and the parents of the others (by name).
	run := func(t *testing.T, opts ...sdktrace.TracerProviderOption) (roots, under map[string]int) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSyncer(exp))...)
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		rdb := srv.Client(t)
		if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)); err != nil {
			t.Fatal(err)
		}
		sent := &sentCount{}
		rdb.AddHook(sent) // INFO
		c := clientOf(t, rdb, redisync.WithWatchdogTimeout(900*time.Millisecond),
			redisync.WithObserver(redisyncotel.NewObserver(redisyncotel.WithTracerProvider(tp))),
			redisync.WithHooks(redisyncotel.NewHook(redisyncotel.WithTracerProvider(tp)), sent)) // the renewals
		until := func(what string, n *atomic.Int64, want int64) {
			t.Helper()
			for limit := time.Now().Add(5 * time.Second); n.Load() < want; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(limit) {
					t.Fatalf("%s: %d sent in 5s, want %d", what, n.Load(), want)
				}
			}
		}
		ctx, req := tp.Tracer("test").Start(context.Background(), "request")
		m := c.Mutex("otel:background")
		lctx, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		until("renewal pipelines", &sent.pipelines, 2) // every 300ms
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		until("INFO after a release", &sent.info, sent.info.Load()+2) // every 250ms
		t.Logf("two INFO within %v of the release", time.Since(released).Round(time.Millisecond))
		req.End()
		_ = c.Close()

		names := map[trace.SpanID]string{}
		for _, s := range exp.GetSpans() {
			names[s.SpanContext.SpanID()] = s.Name
		}
		roots, under = map[string]int{}, map[string]int{}
		for _, s := range exp.GetSpans() {
			switch {
			case !isRedisCommand(s.Attributes):
			case !s.Parent.IsValid():
				roots[s.Name]++
			default:
				under[names[s.Parent.SpanID()]]++
			}
		}
		t.Logf("root command spans %v; command spans under %v", roots, under)
		return roots, under
	}
	t.Run("all sampled", func(t *testing.T) {
		roots, under := run(t)
		if roots["info"] < 2 {
			t.Errorf("%d INFO root spans, want 2 or more", roots["info"])
		}
		if n := roots["PIPELINE EVALSHA"] + roots["PIPELINE EVAL"]; n < 2 {
			t.Errorf("%d renewal pipelines' root spans, want 2 or more", n)
		}
		if under["redisync.wait"] == 0 || under["redisync.hold"] == 0 {
			t.Errorf("the calls' commands are not under the lock's spans: %v", under)
		}
	})
	t.Run("skipBackground", func(t *testing.T) {
		roots, under := run(t, sdktrace.WithSampler(skipBackground{sdktrace.ParentBased(sdktrace.AlwaysSample())}))
		if len(roots) > 0 {
			t.Errorf("root command spans left: %v", roots)
		}
		if under["redisync.wait"] == 0 || under["redisync.hold"] == 0 {
			t.Errorf("the calls' commands were dropped too: %v", under)
		}
	})
}

// sentCount is a go-redis hook that counts the INFO commands and the
// pipelines sent.
type sentCount struct{ info, pipelines atomic.Int64 }

func (h *sentCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "info") {
			h.info.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *sentCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		return next(ctx, cmds)
	}
}
