// Package redisyncotel traces redisync's locks with OpenTelemetry: a span
// for each wait for a lock and for each hold of one, under the span of the
// call that took it (or tried to), with the lock's kind, name and outcome.
//
//	c, err := redisync.New(rdb, redisync.WithObserver(redisyncotel.NewObserver()))
//
// A wait's span ("redisync.wait") runs from the call (Lock, TryLock,
// TryLockFor, RLock, Acquire, Campaign, ...) to its grant or its failure;
// a hold's span ("redisync.hold") from the grant to the hold's end: its
// last release, the end of the context it was taken with, a lost lease.
// Both are children of the span in the context given to the call, and are
// recorded when they end, with their real start time (redisync tells its
// Observer of a wait or a hold once it is over). A re-entry of a hold
// makes no span.
//
// Attributes: redisync.lock.kind (redisync.KindMutex, ...),
// redisync.lock.name, redisync.outcome (OutcomeAcquired, ... for a wait;
// OutcomeReleased or OutcomeLost for a hold), redisync.handoff (a Mutex
// handed over in this process). A wait that failed for another reason
// than not being acquired, and a lost hold, have an error status.
//
// The Redis commands themselves are traced by go-redis's own
// instrumentation (redisotel), installed on the go-redis client.
//
// It is a module of its own, so that redisync's core does not depend on
// OpenTelemetry.
package redisyncotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redisync-go/redisync"
)

// ScopeName is the instrumentation scope of the spans: the tracer's name.
const ScopeName = "github.com/redisync-go/redisync/extra/redisyncotel"

// The attributes of the spans.
const (
	KindKey    = attribute.Key("redisync.lock.kind") // HoldEvent.Kind
	NameKey    = attribute.Key("redisync.lock.name") // the lock's name
	OutcomeKey = attribute.Key("redisync.outcome")   // see Outcome
	HandoffKey = attribute.Key("redisync.handoff")   // a wait ended by a handoff in this process
)

// The outcomes of a wait and of a hold, as the redisync.outcome attribute
// carries them.
const (
	OutcomeAcquired         = "acquired"          // the wait got the lock
	OutcomeNotAcquired      = "not_acquired"      // TryLock, or TryLockFor's bound (ErrNotAcquired)
	OutcomeCanceled         = "canceled"          // the call's context was cancelled
	OutcomeDeadlineExceeded = "deadline_exceeded" // the call's context's deadline passed
	OutcomeClosed           = "closed"            // the Client was closed (ErrClosed)
	OutcomeError            = "error"             // Redis failed, or another error
	OutcomeReleased         = "released"          // a hold ended without losing its lease
	OutcomeLost             = "lost"              // a hold's lease was lost (ErrLeaseLost)
)

// Outcome returns the outcome of a wait that returned err (nil: acquired).
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, redisync.ErrNotAcquired):
		return OutcomeNotAcquired
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, redisync.ErrClosed):
		return OutcomeClosed
	default:
		return OutcomeError
	}
}

// Option configures NewObserver.
type Option func(*config)

type config struct {
	tp    trace.TracerProvider
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

// WithAttributes adds attrs to every span.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// NewObserver returns an Observer that records a span for each wait and
// each hold (see the package's doc). Give it to redisync.New with
// redisync.WithObserver; other observers may be given beside it.
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
	t := &tracer{t: cfg.tp.Tracer(ScopeName), attrs: cfg.attrs}
	return &redisync.Observer{
		Acquired:      t.acquired,
		AcquireFailed: t.failed,
		Released:      t.released,
		LeaseLost:     t.lost,
	}
}

type tracer struct {
	t     trace.Tracer
	attrs []attribute.KeyValue
}

// record records a span named name, which ran for d until now, with the
// error status errMsg ("": none).
func (t *tracer) record(ctx context.Context, name string, d time.Duration, e redisync.HoldEvent, outcome, errMsg string,
	more ...attribute.KeyValue) {
	end := time.Now()
	attrs := make([]attribute.KeyValue, 0, 4+len(more)+len(t.attrs))
	attrs = append(attrs, KindKey.String(e.Kind), NameKey.String(e.Name), OutcomeKey.String(outcome))
	attrs = append(append(attrs, more...), t.attrs...)
	_, s := t.t.Start(ctx, name, trace.WithTimestamp(end.Add(-d)), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
	if errMsg != "" {
		s.SetStatus(codes.Error, errMsg)
	}
	s.End(trace.WithTimestamp(end))
}

func (t *tracer) acquired(ctx context.Context, e redisync.HoldEvent) {
	t.record(ctx, "redisync.wait", e.Wait, e, OutcomeAcquired, "", HandoffKey.Bool(e.Handoff))
}

func (t *tracer) failed(ctx context.Context, e redisync.HoldEvent) {
	outcome, msg := Outcome(e.Cause), ""
	if outcome != OutcomeNotAcquired && e.Cause != nil {
		msg = e.Cause.Error()
	}
	t.record(ctx, "redisync.wait", e.Wait, e, outcome, msg)
}

func (t *tracer) released(ctx context.Context, e redisync.HoldEvent) {
	t.record(ctx, "redisync.hold", e.Held, e, OutcomeReleased, "")
}

func (t *tracer) lost(ctx context.Context, e redisync.HoldEvent) {
	msg := "lease lost"
	if e.Cause != nil {
		msg = e.Cause.Error()
	}
	t.record(ctx, "redisync.hold", e.Held, e, OutcomeLost, msg)
}
