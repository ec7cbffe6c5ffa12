package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokend/tokend/internal/infra/tracing"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// A statement run inside a traced operation is a child span with the
// statement's text and, when it fails, its SQLSTATE, never its arguments
// or the error's message; one run outside any (a background loop) starts
// no trace.
func TestDBSpansOnlyUnderAParent(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pc, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = tracing.NewDB(tp)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const arg = "argument-never-recorded"
	var s string
	if err := pool.QueryRow(context.Background(), "SELECT $1::text", arg).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans for a statement outside any trace, want 0", n)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	if err := pool.QueryRow(ctx, "SELECT $1::text", arg).Scan(&s); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, "SELECT 1/$1::int", 0)
	if err == nil {
		t.Fatal("division by zero succeeded")
	}
	parent.End()
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 2 statements and their parent", len(spans))
	}
	for i, s := range spans[:2] {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.Name() != "SELECT" {
			t.Errorf("span %d: %q under %v, want SELECT under the request", i, s.Name(), s.Parent().SpanID())
		}
		for _, kv := range s.Attributes() {
			if v := kv.Value.Emit(); strings.Contains(v, arg) || strings.Contains(v, "division") {
				t.Errorf("attribute %s = %q says an argument or an error message", kv.Key, v)
			}
		}
	}
	got := map[string]string{}
	for _, kv := range spans[1].Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if got["db.response.status_code"] != "22012" || got["error.type"] != "22012" || got["db.query.text"] != "SELECT 1/$1::int" {
		t.Errorf("failed statement's attributes %v, want its SQLSTATE 22012 and text", got)
	}
}
