package redisyncotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
)

// A traced service, with go-redis's own tracing installed as go-redis
// installs it (redisotel.InstrumentTracing, with its defaults: redisync's
// calls no longer go through go-redis, so its statement races nothing)
// and NewHook on redisync's own calls: a request waits for a Mutex
// another service holds, then works under it. Every Redis call the
// request's lock sends while it waits is a child of its redisync.wait
// span, the calls sent once it holds (its release) are children of its
// redisync.hold span, and so is work done with the hold's context: none
// is left a sibling of the lock's spans under the request.
func TestTracedService(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		tel := newTelemetry(t)
		rdb := rdbOf(t, srv)
		if err := redisotel.InstrumentTracing(rdb, redisotel.WithTracerProvider(tel.tp)); err != nil {
			t.Fatal(err)
		}
		c := clientOf(t, rdb, redisync.WithObserver(tel.observer()), redisync.WithHooks(redisyncotel.NewHook(redisyncotel.WithTracerProvider(tel.tp))))
		other := client(t, srv)
		held, err := other.Mutex("otel:svc").Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(150*time.Millisecond, func() { _ = other.Mutex("otel:svc").Unlock(held) })

		ctx, req := tel.tp.Tracer("test").Start(context.Background(), "GET /orders/42")
		m := c.Mutex("otel:svc")
		lctx, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, work := tel.tp.Tracer("test").Start(lctx, "work")
		if err := rdb.Get(lctx, "otel:svc:data").Err(); err != nil && err.Error() != "redis: nil" {
			t.Fatal(err)
		}
		work.End()
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		req.End()

		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range tel.exp.GetSpans() {
			byID[s.SpanContext.SpanID()] = s
		}
		waits, holds := spansNamed(tel.exp, "redisync.wait"), spansNamed(tel.exp, "redisync.hold")
		if len(waits) != 1 || len(holds) != 1 {
			t.Fatalf("%d waits and %d holds, want one of each", len(waits), len(holds))
		}
		wait, hold := waits[0].SpanContext.SpanID(), holds[0].SpanContext.SpanID()
		underWait, underHold := 0, 0
		for _, s := range tel.exp.GetSpans() {
			if s.SpanContext.TraceID() != req.SpanContext().TraceID() || s.Name == "redisync.wait" || s.Name == "redisync.hold" {
				continue // another trace (a renewal, the rival's), or the lock's own spans
			}
			if s.InstrumentationScope.Name == redisyncotel.ScopeName && !hasAttr(s, "db.system.name", "redis") {
				t.Errorf("redisync's call span %q without db.system.name=redis: %v", s.Name, s.Attributes)
			}
			switch p := s.Parent.SpanID(); {
			case s.Name == "GET /orders/42":
			case s.Name == "work":
				if p != hold {
					t.Errorf("work under the hold is a child of %q, not of redisync.hold", byID[p].Name)
				}
			case p == wait:
				underWait++
				if s.StartTime.Before(waits[0].StartTime) || s.EndTime.After(waits[0].EndTime) {
					t.Errorf("command %q ran from %v to %v, outside its wait (%v to %v)", s.Name, s.StartTime, s.EndTime,
						waits[0].StartTime, waits[0].EndTime)
				}
			case p == hold:
				underHold++
			case byID[p].Name == "work", byID[p].InstrumentationScope.Name != "test" && byID[p].InstrumentationScope.Name != redisyncotel.ScopeName:
				// work's command, or a command's connection set-up
			default:
				t.Errorf("command span %q is a child of %q, not of the lock's wait or hold", s.Name, byID[p].Name)
			}
		}
		// The first attempt, and the one after the unlock's message.
		if underWait < 2 {
			t.Errorf("%d command spans under redisync.wait, want the attempts before and after the wake-up", underWait)
		}
		if underHold < 1 {
			t.Errorf("no command span under redisync.hold (the release)")
		}
	})
}

// hasAttr reports whether s has the attribute k with value v.
func hasAttr(s tracetest.SpanStub, k, v string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == k && a.Value.Emit() == v {
			return true
		}
	}
	return false
}

// The metrics beside the spans: the durations of waits and holds by kind
// and outcome, in seconds, lost leases and handoffs; the meter's scope has
// the module's version.
func TestMetrics(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		c, tel := traced(t, srv, redisync.WithWatchdogTimeout(300*time.Millisecond))
		bg := context.Background()

		// A wait of 100ms, a hold of 50ms.
		other := client(t, srv)
		held, err := other.Mutex("otel:m").Lock(bg)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, func() { _ = other.Mutex("otel:m").Unlock(held) })
		m := c.Mutex("otel:m")
		lctx, err := m.Lock(bg)
		if err != nil {
			t.Fatal(err)
		}
		// A goroutine of the same Client waits meanwhile: the Unlock hands
		// the lock to it.
		handed := make(chan context.Context, 1)
		go func() {
			h, err := m.Lock(bg)
			if err != nil {
				t.Error(err)
			}
			handed <- h
		}()
		time.Sleep(50 * time.Millisecond)
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(<-handed); err != nil {
			t.Fatal(err)
		}
		// A TryLock not acquired.
		held, err = other.Mutex("otel:m").Lock(bg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.TryLock(bg); err == nil {
			t.Fatal("TryLock acquired a held Mutex")
		}
		if err := other.Mutex("otel:m").Unlock(held); err != nil {
			t.Fatal(err)
		}
		// A lost hold.
		fctx, err := c.FairMutex("otel:f").Lock(bg)
		if err != nil {
			t.Fatal(err)
		}
		srv.flush(t)
		<-fctx.Done()

		var got []metricdata.Metrics
		deadline := time.Now().Add(2 * time.Second)
		for {
			var rm metricdata.ResourceMetrics
			if err := tel.reader.Collect(bg, &rm); err != nil {
				t.Fatal(err)
			}
			if len(rm.ScopeMetrics) != 1 {
				t.Fatalf("%d scopes of metrics, want redisyncotel's", len(rm.ScopeMetrics))
			}
			if s := rm.ScopeMetrics[0].Scope; s.Name != redisyncotel.ScopeName || s.Version != redisyncotel.Version {
				t.Errorf("meter's scope %s@%s, want %s@%s", s.Name, s.Version, redisyncotel.ScopeName, redisyncotel.Version)
			}
			got = rm.ScopeMetrics[0].Metrics
			if sumOf(got, "redisync.leases.lost") == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		mutex, fair := string(redisync.KindMutex), string(redisync.KindFairMutex)
		for _, want := range []struct {
			name, kind string
			outcome    redisync.Outcome
			count      uint64
			min, max   float64 // of the sum, in seconds
		}{
			{"redisync.wait.duration", mutex, redisync.OutcomeAcquired, 2, 0.1, 10},
			{"redisync.wait.duration", mutex, redisync.OutcomeNotAcquired, 1, 0, 5},
			{"redisync.wait.duration", fair, redisync.OutcomeAcquired, 1, 0, 5},
			{"redisync.hold.duration", mutex, redisync.OutcomeReleased, 2, 0.05, 10},
			{"redisync.hold.duration", fair, redisync.OutcomeLost, 1, 0, 5},
		} {
			count, sum := histogram(t, got, want.name, want.kind, want.outcome)
			if count != want.count || sum < want.min || sum > want.max {
				t.Errorf("%s{kind=%s,outcome=%s}: %d measures, sum %.3fs; want %d, sum in [%v, %v]s", want.name, want.kind,
					want.outcome, count, sum, want.count, want.min, want.max)
			}
		}
		if n := sumOf(got, "redisync.leases.lost", redisyncotel.KindKey.String(fair)); n != 1 {
			t.Errorf("redisync.leases.lost{kind=%s} = %d, want 1", fair, n)
		}
		if n := sumOf(got, "redisync.handoffs", redisyncotel.KindKey.String(mutex)); n != 1 {
			t.Errorf("redisync.handoffs{kind=%s} = %d, want 1", mutex, n)
		}
	})
}

// histogram returns the count and sum of the histogram name's point with
// kind and outcome, and checks its unit.
func histogram(t *testing.T, ms []metricdata.Metrics, name, kind string, outcome redisync.Outcome) (uint64, float64) {
	t.Helper()
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		if m.Unit != "s" {
			t.Errorf("%s's unit is %q, want s", name, m.Unit)
		}
		h, ok := m.Data.(metricdata.Histogram[float64])
		if !ok {
			t.Fatalf("%s is a %T, not a histogram", name, m.Data)
		}
		for _, p := range h.DataPoints {
			k, _ := p.Attributes.Value(redisyncotel.KindKey)
			o, _ := p.Attributes.Value(redisyncotel.OutcomeKey)
			if k.AsString() == kind && o.AsString() == string(outcome) {
				return p.Count, p.Sum
			}
		}
	}
	return 0, 0
}

// sumOf returns the sum of the counter name's points with attrs.
func sumOf(ms []metricdata.Metrics, name string, attrs ...attribute.KeyValue) int64 {
	var n int64
	for _, m := range ms {
		s, ok := m.Data.(metricdata.Sum[int64])
		if m.Name != name || !ok {
			continue
		}
	points:
		for _, p := range s.DataPoints {
			for _, a := range attrs {
				if v, ok := p.Attributes.Value(a.Key); !ok || v != a.Value {
					continue points
				}
			}
			n += p.Value
		}
	}
	return n
}
