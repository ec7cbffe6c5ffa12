package dispatch_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/infra/tracing"
)

// With a tracer, each delivery attempt is the root span of a trace of its
// own, with the tenant, endpoint, event, attempt, status and result, and
// the statements recording it under it; the receiver's URL is never an
// attribute.
func TestDeliveryAttemptIsARootSpan(t *testing.T) {
	t.Parallel()
	pool, keys, c, ep := hooked(t, false, "/hook?receiver-credential=x")
	writeEvents(t, pool, "a", 2)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pc, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = tracing.NewDB(tp)
	traced, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	d := newDispatcher(t, dispatch.Config{Pool: traced, Keys: keys, Tracer: tp})
	until(t, d, func() bool { return c.effects() == 2 })

	deliveries, children := 0, 0
	spans := rec.Ended()
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "receiver-credential") || strings.Contains(kv.Value.Emit(), c.srv.URL) {
				t.Errorf("span %s: attribute %s = %q names the receiver's URL", s.Name(), kv.Key, kv.Value.Emit())
			}
		}
		if s.Name() != "webhook delivery" {
			continue
		}
		deliveries++
		if s.Parent().IsValid() {
			t.Errorf("delivery span has parent %v, want a root", s.Parent())
		}
		got := map[string]string{}
		for _, kv := range s.Attributes() {
			got[string(kv.Key)] = kv.Value.Emit()
		}
		if got["tokend.tenant"] != "a" || got["tokend.webhook.endpoint"] != ep.ID || got["tokend.webhook.result"] != "delivered" ||
			!strings.HasPrefix(got["http.response.status_code"], "2") || got["tokend.webhook.attempt"] != "1" || got["tokend.event.id"] == "" {
			t.Errorf("delivery span attributes %v", got)
		}
		for _, o := range spans {
			if o.Parent().SpanID() == s.SpanContext().SpanID() {
				children++
			}
		}
	}
	if deliveries != 2 || children < 2 {
		t.Errorf("%d delivery spans with %d statements under them; want 2, each with its record", deliveries, children)
	}
}
