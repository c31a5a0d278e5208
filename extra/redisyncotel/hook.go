package redisyncotel

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// NewHook returns a hook that gives each Redis call redisync sends a span
// of its own, with OpenTelemetry's database attributes (db.system.name
// redis, db.operation.name: EVALSHA, EVAL, or the command; a batch's
// db.operation.batch.size), a child of the span in the call's context:
// the wait's (redisync.wait) for an acquisition's attempts, the hold's
// (redisync.hold) for its release. Give it to redisync.New with
// redisync.WithHooks: redisync's calls do not go through the go-redis
// client's own hooks (redisotel's).
//
//	c, err := redisync.New(rdb,
//		redisync.WithObserver(redisyncotel.NewObserver()),
//		redisync.WithHooks(redisyncotel.NewHook()))
//
// WithTracerProvider and WithAttributes apply; the meter is not used. The
// statement (db.query.text) is not recorded: it would carry the script's
// arguments, the owner's field among them.
func NewHook(opts ...Option) redis.Hook {
	cfg := config{}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	return &hook{t: cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)), attrs: cfg.attrs}
}

type hook struct {
	t     trace.Tracer
	attrs []attribute.KeyValue
}

func (h *hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op := strings.ToUpper(cmd.Name())
		attrs := append([]attribute.KeyValue{semconv.DBSystemNameRedis, semconv.DBOperationName(op)}, h.attrs...)
		ctx, span := h.t.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer span.End()
		err := next(ctx, cmd)
		record(span, err)
		return err
	}
}

func (h *hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		op := "PIPELINE"
		if len(cmds) > 0 {
			op = "PIPELINE " + strings.ToUpper(cmds[0].Name())
		}
		attrs := append([]attribute.KeyValue{semconv.DBSystemNameRedis, semconv.DBOperationName(op), semconv.DBOperationBatchSize(len(cmds))}, h.attrs...)
		ctx, span := h.t.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer span.End()
		err := next(ctx, cmds)
		record(span, err)
		return err
	}
}

// record sets span's status from err: redis.Nil (no value) is no error.
func record(span trace.Span, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
