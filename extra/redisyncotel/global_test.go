package redisyncotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
	"github.com/redisync-go/redisync/internal/redistest"
)

// With no provider given, the spans go to the global provider, even one
// set after NewObserver (otel's global provider delegates to it).
func TestGlobalProviderSetLater(t *testing.T) {
	obs := redisyncotel.NewObserver()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otel.SetTracerProvider(tp)

	c := client(t, redistest.Start(t), redisync.WithObserver(obs))
	m := c.Mutex("otel:global")
	lctx, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 2 {
		t.Fatalf("%d spans through the global provider set after NewObserver, want 2", n)
	}
}
