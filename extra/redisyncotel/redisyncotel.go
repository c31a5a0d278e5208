// Package redisyncotel traces and measures redisync's locks with
// OpenTelemetry: a live span for each wait for a lock and for each hold of
// one, under the span of the call that took it (or tried to), and metrics
// of their durations and outcomes beside them.
//
//	c, err := redisync.New(rdb, redisync.WithObserver(redisyncotel.NewObserver()))
//
// A wait's span ("redisync.wait") starts when the call (Lock, TryLock,
// TryLockFor, RLock, Acquire, Campaign, ...) starts its acquisition and
// ends at its grant or its failure; the Redis calls the wait sends are
// its children when NewHook is given to redisync.WithHooks (redisync's
// calls do not go through the go-redis client, whose own tracing,
// redisotel's, sees its subscriptions only). A
// hold's span ("redisync.hold") starts at the grant and ends with the
// hold: its last release, the end of the context it was taken with, a
// lost lease. The hold's context carries it, so work done under the hold
// (and the release's commands) can be its children. Both are children of
// the span in the context given to the call. A re-entry of a hold makes
// no span.
//
// Attributes: redisync.lock.kind (redisync.KindMutex, ...),
// redisync.lock.name, redisync.outcome (redisync.OutcomeAcquired, ... for
// a wait; OutcomeReleased or OutcomeLost for a hold), redisync.handoff (a
// Mutex handed over in this process). A wait that failed for another
// reason than not being acquired (which is TryLock's answer, not an
// error), and a lost hold, have an error status and an error.type, as
// OpenTelemetry's semantic conventions ask: context_canceled,
// context_deadline_exceeded, client_closed (redisync.ErrClosed),
// lease_lost, or _OTHER (Redis failed, or another error; the status's
// description says which).
//
// The metrics (instruments of the meter named ScopeName), whose
// attributes are redisync.lock.kind and, on the durations,
// redisync.outcome (never the lock's name, whose values are unbounded):
//
//	redisync.wait.duration   histogram (s): each wait for a first acquisition
//	redisync.hold.duration   histogram (s): each hold, outcome released or lost
//	redisync.leases.lost     counter ({hold}): holds that lost their lease
//	redisync.handoffs        counter ({hold}): acquisitions handed over in a process
//
// The calls redisync sends on its own (the watchdog's renewal batches,
// INFO replication every 250ms to see a failover, the releases of holds
// that ended with their context) carry no span, so each starts a trace
// (in NewHook's spans, or go-redis's tracing for INFO):
// ExampleNewObserver's sampler drops them, and docs/observing.md in
// redisync's repository lists them.
//
// The tracer's and the meter's instrumentation scope is ScopeName, at
// Version. It is a module of its own, so that redisync's core does not
// depend on OpenTelemetry.
package redisyncotel

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
)

// ScopeName is the instrumentation scope of the spans and the metrics:
// the tracer's and the meter's name.
const ScopeName = "github.com/redisync-go/redisync/extra/redisyncotel"

// Version is this module's version, the instrumentation scope's version.
const Version = "0.10.0"

// The attributes of the spans and the metrics.
const (
	KindKey    = attribute.Key("redisync.lock.kind") // HoldEvent.Kind
	NameKey    = attribute.Key("redisync.lock.name") // the lock's name (spans only)
	OutcomeKey = attribute.Key("redisync.outcome")   // HoldEvent.Outcome
	HandoffKey = attribute.Key("redisync.handoff")   // a wait ended by a handoff in this process (spans only)
)

// Option configures NewObserver.
type Option func(*config)

type config struct {
	tp    trace.TracerProvider
	mp    metric.MeterProvider
	attrs []attribute.KeyValue
}

// WithTracerProvider has the spans made by tp. The default is otel's
// global provider, which follows an otel.SetTracerProvider made before or
// after NewObserver.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithMeterProvider has the metrics recorded by mp. The default is otel's
// global provider, which follows an otel.SetMeterProvider made before or
// after NewObserver.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithAttributes adds attrs to every span and every measurement. Keep
// their values few, as the metrics' series multiply by them.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// durationBuckets are the histograms' bucket boundaries, in seconds: from
// a round trip on a free lock to a leadership held for an hour.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600}

// NewObserver returns an Observer that traces and measures each wait and
// each hold (see the package's doc). Give it to redisync.New with
// redisync.WithObserver; other observers may be given beside it. An
// instrument the meter cannot make is reported to otel.Handle, and not
// recorded.
func NewObserver(opts ...Option) *redisync.Observer {
	cfg := config{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	t := &observer{
		t:     cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		attrs: cfg.attrs,
	}
	m := cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	var err error
	t.waits, err = m.Float64Histogram("redisync.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Waits for a first acquisition of a lock, by kind and outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	handle(err)
	t.holds, err = m.Float64Histogram("redisync.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Holds of a lock, from the grant to the end, by kind and outcome (released or lost)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	handle(err)
	t.lost, err = m.Int64Counter("redisync.leases.lost", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds that lost their lease, by kind."))
	handle(err)
	t.handoffs, err = m.Int64Counter("redisync.handoffs", metric.WithUnit("{hold}"),
		metric.WithDescription("Acquisitions handed over by a holder of the same Client (cohort handoff), by kind."))
	handle(err)
	return &redisync.Observer{
		WaitStarted:   t.waitStarted,
		Acquired:      t.acquired,
		AcquireFailed: t.failed,
		HoldStarted:   t.holdStarted,
		Released:      t.ended,
		LeaseLost:     t.ended,
	}
}

// handle reports err, if any, to otel's error handler.
func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

type observer struct {
	t              trace.Tracer
	attrs          []attribute.KeyValue
	waits, holds   metric.Float64Histogram
	lost, handoffs metric.Int64Counter

	// measures are the metrics' attribute sets, made once for each kind
	// and outcome (a few dozen at most): a measurement is then made
	// without an allocation (see measure).
	measures sync.Map // measureKey -> metric.MeasurementOption
}

// measureKey names one of the metrics' attribute sets.
type measureKey struct {
	kind    redisync.Kind
	outcome redisync.Outcome // "" without one
}

// internalSpan is every span's kind, as a start option made once.
var internalSpan = trace.WithSpanKind(trace.SpanKindInternal)

// The keys under which a context carries this observer's live spans.
type (
	waitKey struct{ o *observer }
	holdKey struct{ o *observer }
)

// start starts a span named name under ctx's span, for e, and returns a
// copy of ctx that carries it as its current span and under key.
func (o *observer) start(ctx context.Context, key any, name string, e redisync.HoldEvent) context.Context {
	attrs := make([]attribute.KeyValue, 0, 2+len(o.attrs))
	attrs = append(append(attrs, KindKey.String(string(e.Kind)), NameKey.String(e.Name)), o.attrs...)
	ctx, s := o.t.Start(ctx, name, internalSpan, trace.WithAttributes(attrs...))
	return context.WithValue(ctx, key, s)
}

// end ends the span that ctx carries under key, with e's outcome and, for
// a failure, error.type and an error status. A span not started (an
// Observer whose WaitStarted or HoldStarted was not given to the Client)
// is recorded now, as having run for d until now.
func (o *observer) end(ctx context.Context, key any, name string, d time.Duration, e redisync.HoldEvent, more ...attribute.KeyValue) {
	s, _ := ctx.Value(key).(trace.Span)
	if s == nil {
		now := time.Now()
		attrs := make([]attribute.KeyValue, 0, 2+len(o.attrs))
		attrs = append(append(attrs, KindKey.String(string(e.Kind)), NameKey.String(e.Name)), o.attrs...)
		_, s = o.t.Start(ctx, name, trace.WithTimestamp(now.Add(-d)), trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrs...))
	}
	s.SetAttributes(append(more, OutcomeKey.String(string(e.Outcome)))...)
	if et := errorType(e.Outcome); et != "" {
		msg := string(e.Outcome)
		if e.Cause != nil {
			msg = e.Cause.Error()
		}
		s.SetAttributes(semconv.ErrorTypeKey.String(et))
		s.SetStatus(codes.Error, msg)
	}
	s.End()
}

// errorType returns the error.type of a wait or a hold that ended with
// outcome, or "" when it did not fail.
func errorType(outcome redisync.Outcome) string {
	switch outcome {
	case redisync.OutcomeAcquired, redisync.OutcomeNotAcquired, redisync.OutcomeReleased:
		return ""
	case redisync.OutcomeCanceled:
		return "context_canceled"
	case redisync.OutcomeDeadlineExceeded:
		return "context_deadline_exceeded"
	case redisync.OutcomeClosed:
		return "client_closed"
	case redisync.OutcomeLost:
		return "lease_lost"
	default:
		return semconv.ErrorTypeOther.Value.AsString()
	}
}

// measure returns the measurement options of e: its kind, with its
// outcome when withOutcome.
func (o *observer) measure(e redisync.HoldEvent, withOutcome bool) metric.MeasurementOption {
	k := measureKey{kind: e.Kind}
	if withOutcome {
		k.outcome = e.Outcome
	}
	if m, ok := o.measures.Load(k); ok {
		return m.(metric.MeasurementOption)
	}
	attrs := make([]attribute.KeyValue, 0, 2+len(o.attrs))
	attrs = append(attrs, KindKey.String(string(k.kind)))
	if withOutcome {
		attrs = append(attrs, OutcomeKey.String(string(k.outcome)))
	}
	m, _ := o.measures.LoadOrStore(k, metric.WithAttributes(append(attrs, o.attrs...)...))
	return m.(metric.MeasurementOption)
}

func (o *observer) waitStarted(ctx context.Context, e redisync.HoldEvent) context.Context {
	return o.start(ctx, waitKey{o}, "redisync.wait", e)
}

func (o *observer) acquired(ctx context.Context, e redisync.HoldEvent) {
	o.end(ctx, waitKey{o}, "redisync.wait", e.Wait, e, HandoffKey.Bool(e.Handoff))
	o.waits.Record(ctx, e.Wait.Seconds(), o.measure(e, true))
	if e.Handoff {
		o.handoffs.Add(ctx, 1, o.measure(e, false))
	}
}

func (o *observer) failed(ctx context.Context, e redisync.HoldEvent) {
	o.end(ctx, waitKey{o}, "redisync.wait", e.Wait, e)
	o.waits.Record(ctx, e.Wait.Seconds(), o.measure(e, true))
}

func (o *observer) holdStarted(ctx context.Context, e redisync.HoldEvent) context.Context {
	return o.start(ctx, holdKey{o}, "redisync.hold", e)
}

// ended ends a hold: Released and LeaseLost.
func (o *observer) ended(ctx context.Context, e redisync.HoldEvent) {
	o.end(ctx, holdKey{o}, "redisync.hold", e.Held, e)
	o.holds.Record(ctx, e.Held.Seconds(), o.measure(e, true))
	if e.Outcome == redisync.OutcomeLost {
		o.lost.Add(ctx, 1, o.measure(e, false))
	}
}
