package redisyncotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
	"github.com/redisync-go/redisync/internal/redistest"
)

// server is a Redis for a test: a private redis-server, or miniredis.
type server struct {
	addr  string
	flush func(t *testing.T) // deletes every key
}

// eachServer runs fn against a private redis-server and against
// miniredis, in parallel.
func eachServer(t *testing.T, fn func(t *testing.T, srv server)) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		s := redistest.Start(t)
		fn(t, server{addr: s.Addr(), flush: func(t *testing.T) {
			if err := s.Client(t).FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}})
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		mr := miniredis.RunT(t)
		fn(t, server{addr: mr.Addr(), flush: func(*testing.T) { mr.FlushAll() }})
	})
}

// telemetry is where a test's spans and metrics go.
type telemetry struct {
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tel := &telemetry{exp: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tel.exp))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() { _ = tel.tp.Shutdown(context.Background()); _ = tel.mp.Shutdown(context.Background()) })
	return tel
}

// observer returns the Observer under test, feeding tel.
func (tel *telemetry) observer() *redisync.Observer {
	return redisyncotel.NewObserver(redisyncotel.WithTracerProvider(tel.tp), redisyncotel.WithMeterProvider(tel.mp),
		redisyncotel.WithAttributes(attribute.String("service", "test")))
}

// traced returns a Client on srv observed into a new telemetry, with opts.
func traced(t *testing.T, srv server, opts ...redisync.Option) (*redisync.Client, *telemetry) {
	t.Helper()
	tel := newTelemetry(t)
	return client(t, srv, append(opts, redisync.WithObserver(tel.observer()))...), tel
}

func client(t *testing.T, srv server, opts ...redisync.Option) *redisync.Client {
	t.Helper()
	return clientOf(t, rdbOf(t, srv), opts...)
}

func rdbOf(t *testing.T, srv server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func clientOf(t *testing.T, rdb *redis.Client, opts ...redisync.Option) *redisync.Client {
	t.Helper()
	c, err := redisync.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// check fails t unless s is named name, is a child of parent, carries
// kind, lock name and outcome, and errorType ("": none) with an error
// status exactly when errorType is set.
func check(t *testing.T, s tracetest.SpanStub, parent trace.SpanContext, name string, kind redisync.Kind, lock string,
	outcome redisync.Outcome, errorType string) {
	t.Helper()
	if s.Name != name {
		t.Errorf("span %q, want %q", s.Name, name)
	}
	if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
		t.Errorf("span %q is not a child of the caller's span (parent %v, trace %v)", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID())
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{
		redisyncotel.KindKey: string(kind), redisyncotel.NameKey: lock, redisyncotel.OutcomeKey: string(outcome),
		"service": "test", "error.type": errorType,
	} {
		if got := a[k].AsString(); got != want {
			t.Errorf("span %q: %s = %q, want %q", s.Name, k, got, want)
		}
	}
	if failed := s.Status.Code == codes.Error; failed != (errorType != "") {
		t.Errorf("span %q: status %v with error.type %q", s.Name, s.Status, errorType)
	}
	if s.EndTime.Before(s.StartTime) {
		t.Errorf("span %q ends (%v) before it starts (%v)", s.Name, s.EndTime, s.StartTime)
	}
	if v := s.InstrumentationScope; v.Name != redisyncotel.ScopeName || v.Version != redisyncotel.Version {
		t.Errorf("span %q: instrumentation scope %s@%s, want %s@%s", s.Name, v.Name, v.Version, redisyncotel.ScopeName, redisyncotel.Version)
	}
}

// spansNamed returns the recorded spans named name.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A wait and a hold are spans under the caller's span, with their real
// durations; a failed wait and a lost hold say so, with error.type; a
// TryLock not acquired is an answer, not an error.
func TestSpans(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		c, tel := traced(t, srv, redisync.WithWatchdogTimeout(300*time.Millisecond))
		exp := tel.exp
		ctx, req := tel.tp.Tracer("test").Start(context.Background(), "request")
		parent := req.SpanContext()

		// A wait of 100ms for a Mutex another Client holds, then a hold of 100ms.
		other := client(t, srv)
		held, err := other.Mutex("otel:lock").Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, func() { _ = other.Mutex("otel:lock").Unlock(held) })
		m := c.Mutex("otel:lock")
		lctx, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans, want a wait and a hold: %v", len(spans), spans)
		}
		wait, hold := spans[0], spans[1]
		check(t, wait, parent, "redisync.wait", redisync.KindMutex, "otel:lock", redisync.OutcomeAcquired, "")
		check(t, hold, parent, "redisync.hold", redisync.KindMutex, "otel:lock", redisync.OutcomeReleased, "")
		if d := wait.EndTime.Sub(wait.StartTime); d < 90*time.Millisecond {
			t.Errorf("the wait's span lasts %v, the wait took 100ms", d)
		}
		if d := hold.EndTime.Sub(hold.StartTime); d < 90*time.Millisecond {
			t.Errorf("the hold's span lasts %v, the hold took 100ms", d)
		}
		if hold.StartTime.Before(wait.EndTime) {
			t.Errorf("the hold starts (%v) before the wait ends (%v)", hold.StartTime, wait.EndTime)
		}
		exp.Reset()

		// A TryLock not acquired, and a wait whose context's deadline passes.
		held, err = other.RWMutex("otel:rw").Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.RWMutex("otel:rw").TryRLock(ctx); err == nil {
			t.Fatal("TryRLock acquired a write-locked RWMutex")
		}
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := c.RWMutex("otel:rw").Lock(dctx); err == nil {
			t.Fatal("Lock acquired a write-locked RWMutex")
		}
		spans = exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans, want two waits: %v", len(spans), spans)
		}
		check(t, spans[0], parent, "redisync.wait", redisync.KindRWRead, "otel:rw", redisync.OutcomeNotAcquired, "")
		check(t, spans[1], parent, "redisync.wait", redisync.KindRWWrite, "otel:rw", redisync.OutcomeDeadlineExceeded,
			"context_deadline_exceeded")
		if d := spans[1].EndTime.Sub(spans[1].StartTime); d < 45*time.Millisecond {
			t.Errorf("the wait's span lasts %v, the wait took 50ms", d)
		}
		if err := other.RWMutex("otel:rw").Unlock(held); err != nil {
			t.Fatal(err)
		}
		exp.Reset()

		// A hold whose key is deleted behind its back is lost.
		sem := c.Semaphore("otel:sem")
		if err := sem.SetPermits(ctx, 2); err != nil {
			t.Fatal(err)
		}
		sctx, err := sem.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		srv.flush(t)
		<-sctx.Done()
		deadline := time.Now().Add(2 * time.Second)
		for len(spansNamed(exp, "redisync.hold")) < 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		holds := spansNamed(exp, "redisync.hold")
		if len(holds) != 1 {
			t.Fatalf("%d hold spans, want the lost hold: %v", len(holds), exp.GetSpans())
		}
		check(t, holds[0], parent, "redisync.hold", redisync.KindSemaphore, "otel:sem", redisync.OutcomeLost, "lease_lost")
		req.End()
	})
}

// A span per hold, not per re-entry; none without a caller's span is made
// a child of anything.
func TestReentryMakesNoSpan(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		c, tel := traced(t, srv)
		m := c.Mutex("otel:re")
		lctx, err := m.Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		rctx, err := m.Lock(lctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(rctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		spans := tel.exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans for one hold entered twice, want 2: %v", len(spans), spans)
		}
		for _, s := range spans {
			if s.Parent.IsValid() {
				t.Errorf("span %q has a parent, but the call had no span", s.Name)
			}
		}
	})
}

// An Observer given to a Client without its WaitStarted and HoldStarted
// (copied field by field, say) still records its spans, when they end,
// with their durations.
func TestSpansWithoutStarts(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		tel := newTelemetry(t)
		o := *tel.observer()
		o.WaitStarted, o.HoldStarted = nil, nil
		c := client(t, srv, redisync.WithObserver(&o))
		ctx, req := tel.tp.Tracer("test").Start(context.Background(), "request")
		m := c.Mutex("otel:nostart")
		lctx, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if err := m.Unlock(lctx); err != nil {
			t.Fatal(err)
		}
		req.End()
		waits, holds := spansNamed(tel.exp, "redisync.wait"), spansNamed(tel.exp, "redisync.hold")
		if len(waits) != 1 || len(holds) != 1 {
			t.Fatalf("%d waits and %d holds, want one of each", len(waits), len(holds))
		}
		check(t, waits[0], req.SpanContext(), "redisync.wait", redisync.KindMutex, "otel:nostart", redisync.OutcomeAcquired, "")
		check(t, holds[0], req.SpanContext(), "redisync.hold", redisync.KindMutex, "otel:nostart", redisync.OutcomeReleased, "")
		if d := holds[0].EndTime.Sub(holds[0].StartTime); d < 45*time.Millisecond {
			t.Errorf("the hold's span lasts %v, the hold took 50ms", d)
		}
	})
}

// A wait that fails for another reason than its context: the Client
// closed while it waited.
func TestClosedWaitErrorType(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		c, tel := traced(t, srv)
		other := client(t, srv)
		if _, err := other.Mutex("otel:closed").Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, req := tel.tp.Tracer("test").Start(context.Background(), "request")
		time.AfterFunc(100*time.Millisecond, func() { _ = c.Close() })
		if _, err := c.Mutex("otel:closed").Lock(ctx); err == nil {
			t.Fatal("Lock acquired a held Mutex")
		}
		req.End()
		waits := spansNamed(tel.exp, "redisync.wait")
		if len(waits) != 1 {
			t.Fatalf("%d waits, want 1", len(waits))
		}
		check(t, waits[0], req.SpanContext(), "redisync.wait", redisync.KindMutex, "otel:closed", redisync.OutcomeClosed, "client_closed")
	})
}
