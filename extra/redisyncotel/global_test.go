package redisyncotel_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
)

// With no provider given, the spans and the metrics go to the global
// providers, even ones set after NewObserver (otel's global providers
// delegate to them).
func TestGlobalProvidersSetLater(t *testing.T) {
	obs := redisyncotel.NewObserver()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)

	c := client(t, server{addr: miniredis.RunT(t).Addr()}, redisync.WithObserver(obs))
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
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.ScopeMetrics) != 1 || len(rm.ScopeMetrics[0].Metrics) != 2 {
		t.Fatalf("metrics through the global provider set after NewObserver: %+v, want the wait's and the hold's", rm.ScopeMetrics)
	}
}
