package tracing

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// A span is started for a round trip only inside a traced operation (a
// request, a delivery): the background loops (the dispatcher's polls, the
// sweeper, the feed) would otherwise each start a trace of one span per
// statement, every second, on every instance.
func traced(ctx context.Context) bool { return trace.SpanContextFromContext(ctx).IsValid() }

// DB makes a child span of each statement, batch and connect pgx runs: set
// it as pgx.ConnConfig.Tracer. Its attributes are the statement's text (a
// constant with $n placeholders: tokend builds no SQL from request data),
// its first keyword, and on error the SQLSTATE; never its arguments, which
// hold tenants' data, and never an error message, which may quote them.
type DB struct{ tracer trace.Tracer }

var (
	_ pgx.QueryTracer   = (*DB)(nil)
	_ pgx.BatchTracer   = (*DB)(nil)
	_ pgx.ConnectTracer = (*DB)(nil)
)

// DB returns the pgx tracer of t; nil when t is nil (tracing off), which
// the caller must not install.
func (t *Tracing) DB() *DB {
	if t == nil {
		return nil
	}
	return NewDB(t.provider)
}

// NewDB returns a pgx tracer on tp.
func NewDB(tp trace.TracerProvider) *DB { return &DB{tracer: tp.Tracer(instrumentation)} }

func (d *DB) start(ctx context.Context, name string, attrs ...attribute.KeyValue) context.Context {
	ctx, _ = d.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, semconv.DBSystemNamePostgreSQL)...))
	return ctx
}

// operation is the statement's first keyword (SELECT, WITH, INSERT…),
// which names its span; "postgresql" when there is none.
func operation(sql string) string {
	sql = strings.TrimLeft(sql, " \t\r\n(")
	n := 0
	for n < len(sql) && n < 16 && (sql[n]|0x20 >= 'a' && sql[n]|0x20 <= 'z') {
		n++
	}
	if n == 0 {
		return "postgresql"
	}
	return strings.ToUpper(sql[:n])
}

func end(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if err != nil {
		var pgErr *pgconn.PgError
		kind := "error"
		if errors.As(err, &pgErr) {
			kind = pgErr.Code
			span.SetAttributes(semconv.DBResponseStatusCode(pgErr.Code))
		} else if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			kind = "canceled"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, kind)
	}
	span.End()
}

// TraceQueryStart implements pgx.QueryTracer.
func (d *DB) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	op := operation(data.SQL)
	return d.start(ctx, op, semconv.DBOperationName(op), semconv.DBQueryText(data.SQL))
}

// TraceQueryEnd implements pgx.QueryTracer.
func (d *DB) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

// TraceBatchStart implements pgx.BatchTracer: one span for the batch.
func (d *DB) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	return d.start(ctx, "BATCH", semconv.DBOperationName("BATCH"), semconv.DBOperationBatchSize(n))
}

// TraceBatchQuery implements pgx.BatchTracer.
func (d *DB) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (d *DB) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// TraceConnectStart implements pgx.ConnectTracer: a connection opened for
// a request (the pool was empty) is part of its time.
func (d *DB) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	if !traced(ctx) {
		return ctx
	}
	return d.start(ctx, "connect", semconv.DBOperationName("connect"))
}

// TraceConnectEnd implements pgx.ConnectTracer.
func (d *DB) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	end(ctx, data.Err)
}

// Redis returns the go-redis hook of t (add it with AddHook); nil when t
// is nil (tracing off).
func (t *Tracing) Redis() redis.Hook {
	if t == nil {
		return nil
	}
	return NewRedis(t.provider)
}

// NewRedis returns a go-redis hook that makes a child span of each command
// and pipeline, named after the command; never its keys or values (a key
// holds a token's id or its secret's hash, a value a cached record).
func NewRedis(tp trace.TracerProvider) redis.Hook {
	return redisHook{tracer: tp.Tracer(instrumentation)}
}

type redisHook struct{ tracer trace.Tracer }

func (redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !traced(ctx) {
			return next(ctx, cmd)
		}
		name := strings.ToUpper(cmd.Name())
		ctx, span := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(semconv.DBSystemNameRedis, semconv.DBOperationName(name)))
		err := next(ctx, cmd)
		redisEnd(span, err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !traced(ctx) {
			return next(ctx, cmds)
		}
		names := make([]string, 0, len(cmds))
		for _, c := range cmds {
			if n := strings.ToUpper(c.Name()); len(names) == 0 || names[len(names)-1] != n {
				names = append(names, n)
			}
		}
		ctx, span := h.tracer.Start(ctx, "PIPELINE", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(semconv.DBSystemNameRedis, semconv.DBOperationName("PIPELINE "+strings.Join(names, " ")),
				semconv.DBOperationBatchSize(len(cmds))))
		err := next(ctx, cmds)
		redisEnd(span, err)
		return err
	}
}

func redisEnd(span trace.Span, err error) {
	// redis.Nil is a miss, an answer.
	if err != nil && !errors.Is(err, redis.Nil) {
		kind := "error"
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			kind = "canceled"
		} else if prefix, _, ok := strings.Cut(err.Error(), " "); ok && prefix == strings.ToUpper(prefix) && len(prefix) <= 16 {
			kind = prefix // a Redis error reply's kind: ERR, MOVED, READONLY…
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, kind)
	}
	span.End()
}
