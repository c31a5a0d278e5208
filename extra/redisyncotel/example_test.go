package redisyncotel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
)

// A request's span gets a child span for the wait for the lock and one for
// the hold, live while the hold lasts: work done with the hold's context
// is its child. Here the spans go to an in-memory exporter; a service gives
// its own TracerProvider (or sets the global one, the default).
func ExampleNewObserver() {
	mr, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := redisync.New(rdb, redisync.WithObserver(redisyncotel.NewObserver(redisyncotel.WithTracerProvider(tp))))
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
	for _, s := range exp.GetSpans() {
		parent := "-"
		if s.Parent.IsValid() {
			parent = names[s.Parent.SpanID()]
		}
		outcome := ""
		for _, kv := range s.Attributes {
			if kv.Key == redisyncotel.OutcomeKey {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Printf("%s (%s) under %s\n", s.Name, outcome, parent)
	}
	// Output:
	// redisync.wait (acquired) under GET /orders/42
	// work () under redisync.hold
	// redisync.hold (released) under GET /orders/42
	// GET /orders/42 () under -
}
