package redisyncotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncotel"
	"github.com/redisync-go/redisync/internal/redistest"
)

// traced returns a Client on a private redis-server whose spans go to the
// returned exporter, with opts.
func traced(t *testing.T, srv *redistest.Server, opts ...redisync.Option) (*redisync.Client, *tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := client(t, srv, append(opts, redisync.WithObserver(redisyncotel.NewObserver(
		redisyncotel.WithTracerProvider(tp), redisyncotel.WithAttributes(attribute.String("service", "test")))))...)
	return c, exp, tp
}

func client(t *testing.T, srv *redistest.Server, opts ...redisync.Option) *redisync.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
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

// check fails t unless s is named name, is a child of parent, and carries
// kind, lock name and outcome.
func check(t *testing.T, s tracetest.SpanStub, parent trace.SpanContext, name, kind, lock, outcome string) {
	t.Helper()
	if s.Name != name {
		t.Errorf("span %q, want %q", s.Name, name)
	}
	if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
		t.Errorf("span %q is not a child of the caller's span (parent %v, trace %v)", s.Name, s.Parent.SpanID(), s.SpanContext.TraceID())
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{
		redisyncotel.KindKey: kind, redisyncotel.NameKey: lock, redisyncotel.OutcomeKey: outcome, "service": "test",
	} {
		if got := a[k].AsString(); got != want {
			t.Errorf("span %q: %s = %q, want %q", s.Name, k, got, want)
		}
	}
	if !s.EndTime.After(s.StartTime) && !s.EndTime.Equal(s.StartTime) {
		t.Errorf("span %q ends (%v) before it starts (%v)", s.Name, s.EndTime, s.StartTime)
	}
}

// A wait and a hold are spans under the caller's span, with their real
// durations; a failed wait and a lost hold say so.
func TestSpans(t *testing.T) {
	srv := redistest.Start(t)
	c, exp, tp := traced(t, srv, redisync.WithWatchdogTimeout(300*time.Millisecond))
	ctx, req := tp.Tracer("test").Start(context.Background(), "request")
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
	check(t, wait, parent, "redisync.wait", redisync.KindMutex, "otel:lock", redisyncotel.OutcomeAcquired)
	check(t, hold, parent, "redisync.hold", redisync.KindMutex, "otel:lock", redisyncotel.OutcomeReleased)
	if d := wait.EndTime.Sub(wait.StartTime); d < 90*time.Millisecond {
		t.Errorf("the wait's span lasts %v, the wait took 100ms", d)
	}
	if d := hold.EndTime.Sub(hold.StartTime); d < 90*time.Millisecond {
		t.Errorf("the hold's span lasts %v, the hold took 100ms", d)
	}
	if hold.StartTime.Before(wait.EndTime.Add(-5 * time.Millisecond)) {
		t.Errorf("the hold starts (%v) before the wait ends (%v)", hold.StartTime, wait.EndTime)
	}
	if wait.Status.Code == codes.Error || hold.Status.Code == codes.Error {
		t.Errorf("error status on a wait that acquired or a hold released: %v, %v", wait.Status, hold.Status)
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
	check(t, spans[0], parent, "redisync.wait", redisync.KindRWRead, "otel:rw", redisyncotel.OutcomeNotAcquired)
	if spans[0].Status.Code == codes.Error {
		t.Errorf("not acquired is an answer, not an error: %v", spans[0].Status)
	}
	check(t, spans[1], parent, "redisync.wait", redisync.KindRWWrite, "otel:rw", redisyncotel.OutcomeDeadlineExceeded)
	if spans[1].Status.Code != codes.Error {
		t.Errorf("a wait whose deadline passed has status %v", spans[1].Status)
	}
	if d := spans[1].EndTime.Sub(spans[1].StartTime); d < 45*time.Millisecond {
		t.Errorf("the wait's span lasts %v, the wait took 50ms", d)
	}
	if err := other.RWMutex("otel:rw").Unlock(held); err != nil {
		t.Fatal(err)
	}
	exp.Reset()

	// A hold whose key is deleted behind its back is lost.
	sctx, err := c.Semaphore("otel:sem", redisync.WithPermits(2)).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	<-sctx.Done()
	deadline := time.Now().Add(2 * time.Second)
	for len(exp.GetSpans()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	spans = exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want a wait and a lost hold: %v", len(spans), spans)
	}
	check(t, spans[1], parent, "redisync.hold", redisync.KindSemaphore, "otel:sem", redisyncotel.OutcomeLost)
	if spans[1].Status.Code != codes.Error {
		t.Errorf("a lost hold has status %v", spans[1].Status)
	}
	req.End()
}

// A span per hold, not per re-entry; none without a caller's span is made
// a child of anything.
func TestReentryMakesNoSpan(t *testing.T) {
	srv := redistest.Start(t)
	c, exp, _ := traced(t, srv)
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
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans for one hold entered twice, want 2: %v", len(spans), spans)
	}
	for _, s := range spans {
		if s.Parent.IsValid() {
			t.Errorf("span %q has a parent, but the call had no span", s.Name)
		}
	}
}

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                       redisyncotel.OutcomeAcquired,
		redisync.ErrNotAcquired:   redisyncotel.OutcomeNotAcquired,
		context.Canceled:          redisyncotel.OutcomeCanceled,
		context.DeadlineExceeded:  redisyncotel.OutcomeDeadlineExceeded,
		redisync.ErrClosed:        redisyncotel.OutcomeClosed,
		redisync.ErrNotReplicated: redisyncotel.OutcomeError,
	} {
		if got := redisyncotel.Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %q, want %q", err, got, want)
		}
	}
}
