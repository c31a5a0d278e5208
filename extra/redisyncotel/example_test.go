package redisyncotel_test

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
)

// A request's span gets a child span for the wait for the lock and one for
// the hold, live while the hold lasts: work done with the hold's context
// is its child, and so are the Redis calls of each, with NewHook given to
// redisync.WithHooks (redisync's calls do not go through the go-redis
// client, whose own tracing sees its subscription and INFO). The calls
// redisync sends on its own (renewals, the INFO replication that watches
// for a failover) carry no span, so each would start a trace of its own:
// skipBackground drops them. Here the spans go to an in-memory exporter; a
// service gives its own TracerProvider (or sets the global one, the
// default).
func ExampleNewObserver() {
	mr, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSampler(skipBackground{sdktrace.ParentBased(sdktrace.AlwaysSample())}))
	defer tp.Shutdown(context.Background())

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tp)); err != nil {
		panic(err)
	}
	c, err := redisync.New(rdb,
		redisync.WithObserver(redisyncotel.NewObserver(redisyncotel.WithTracerProvider(tp))),
		redisync.WithHooks(redisyncotel.NewHook(redisyncotel.WithTracerProvider(tp)))) // a span per Redis call
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx, req := tp.Tracer("example").Start(context.Background(), "GET /orders/42")
	m := c.Mutex("lock:orders:42")
	lctx, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// Work under the lock, with the hold's context: a child of its span.
	_, work := tp.Tracer("example").Start(lctx, "work")
	work.End()
	if err := m.Unlock(lctx); err != nil {
		panic(err)
	}
	req.End()

	names := map[trace.SpanID]string{}
	for _, s := range exp.GetSpans() {
		names[s.SpanContext.SpanID()] = s.Name
	}
	commandsUnder := map[string]bool{} // the parents of the Redis commands' spans
	for _, s := range exp.GetSpans() {
		parent := "-"
		if s.Parent.IsValid() {
			parent = names[s.Parent.SpanID()]
		}
		if isRedisCommand(s.Attributes) {
			commandsUnder[parent] = true
			continue
		}
		outcome := ""
		for _, kv := range s.Attributes {
			if kv.Key == redisyncotel.OutcomeKey {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Printf("%s (%s) under %s\n", s.Name, outcome, parent)
	}
	fmt.Println("Redis commands under:", slices.Sorted(maps.Keys(commandsUnder)))
	// Output:
	// redisync.wait (acquired) under GET /orders/42
	// work () under redisync.hold
	// redisync.hold (released) under GET /orders/42
	// GET /orders/42 () under -
	// Redis commands under: [redisync.hold redisync.wait]
}

// skipBackground drops the spans of the Redis commands that start a trace
// (their context carries no span: the commands redisync sends on its own,
// see docs/observing.md, and any other command sent outside a trace), and
// leaves every other span to next.
type skipBackground struct{ next sdktrace.Sampler }

func (s skipBackground) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() && isRedisCommand(p.Attributes) {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return s.next.ShouldSample(p)
}

func (s skipBackground) Description() string { return "skipBackground{" + s.next.Description() + "}" }

// isRedisCommand reports whether a span's attributes are those of a Redis
// command's span (or a dial's) made by go-redis's tracing: its db.system
// (db.system.name in later semantic conventions) is redis.
func isRedisCommand(attrs []attribute.KeyValue) bool {
	for _, kv := range attrs {
		if (kv.Key == "db.system" || kv.Key == "db.system.name") && kv.Value.AsString() == "redis" {
			return true
		}
	}
	return false
}
