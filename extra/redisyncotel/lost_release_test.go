package redisyncotel_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
)

// Issue 43: a release that finds its hold lost in Redis (a restart without
// persistence, a forced unlock, a deleted key) returns ErrLeaseLost, and
// the hold's span says so: outcome lost, error.type lease_lost, an error
// status; redisync.leases.lost counts it and redisync.hold.duration has it
// as lost. On a Mutex, a FairMutex, both sides of an RWMutex, a Semaphore
// and a MultiLock; the watchdog's default lease is renewed every 10s, so
// no renewal finds the loss first.
func TestLossFoundByReleaseIsAnErrorOnTheHoldSpan(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		c, tel := traced(t, srv)
		bg := context.Background()
		ctx, req := tel.tp.Tracer("test").Start(bg, "request")
		defer req.End()
		rw := c.RWMutex("otel:lost:rw")
		sem := c.Semaphore("otel:lost:sem", redisync.WithPermits(2))
		ml := c.MultiLock([]string{"otel:lost:ml:a", "otel:lost:ml:b"})
		for _, tc := range []struct {
			kind    redisync.Kind
			name    string // the hold span's redisync.lock.name
			acquire func(context.Context) (context.Context, error)
			release func(context.Context) error
		}{
			{redisync.KindMutex, "otel:lost:m", c.Mutex("otel:lost:m").Lock, c.Mutex("otel:lost:m").Unlock},
			{redisync.KindFairMutex, "otel:lost:f", c.FairMutex("otel:lost:f").Lock, c.FairMutex("otel:lost:f").Unlock},
			{redisync.KindRWWrite, "otel:lost:rw", rw.Lock, rw.Unlock},
			{redisync.KindRWRead, "otel:lost:rw", rw.RLock, rw.RUnlock},
			{redisync.KindSemaphore, "otel:lost:sem",
				func(ctx context.Context) (context.Context, error) { return sem.Acquire(ctx, 1) },
				func(ctx context.Context) error { return sem.Release(ctx, 1) }},
			{redisync.KindMultiLock, `"otel:lost:ml:a", "otel:lost:ml:b"`, ml.Lock, ml.Unlock},
		} {
			kind := string(tc.kind)
			tel.exp.Reset()
			hctx, err := tc.acquire(ctx)
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			srv.flush(t)
			if err := tc.release(hctx); !errors.Is(err, redisync.ErrLeaseLost) {
				t.Fatalf("%s: the release of a hold Redis lost returned %v, want ErrLeaseLost", kind, err)
			}
			holds := spansNamed(tel.exp, "redisync.hold")
			if len(holds) != 1 {
				t.Fatalf("%s: %d hold spans, want 1: %v", kind, len(holds), tel.exp.GetSpans())
			}
			check(t, holds[0], req.SpanContext(), "redisync.hold", tc.kind, tc.name, redisync.OutcomeLost, "lease_lost")

			var rm metricdata.ResourceMetrics
			if err := tel.reader.Collect(bg, &rm); err != nil {
				t.Fatal(err)
			}
			got := rm.ScopeMetrics[0].Metrics
			if n := sumOf(got, "redisync.leases.lost", redisyncotel.KindKey.String(kind)); n != 1 {
				t.Errorf("%s: redisync.leases.lost = %d, want 1", kind, n)
			}
			if n, _ := histogram(t, got, "redisync.hold.duration", kind, redisync.OutcomeLost); n != 1 {
				t.Errorf("%s: redisync.hold.duration{outcome=lost} has %d measures, want 1", kind, n)
			}
			if n, _ := histogram(t, got, "redisync.hold.duration", kind, redisync.OutcomeReleased); n != 0 {
				t.Errorf("%s: redisync.hold.duration{outcome=released} has %d measures, want 0", kind, n)
			}
		}
	})
}
