package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/infra/tracing"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

// tracedAPI is an API wired as tokend serve wires it with tracing on: the
// server, its pool and its Redis cache all on one tracer provider, whose
// spans the recorder keeps in memory.
func tracedAPI(t *testing.T) (*api, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pc, err := pgxpool.ParseConfig(ledgertest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = tracing.NewDB(tp)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	c, err := cache.New(cache.Config{URL: redistest.URL(), Prefix: prefix, Hook: tracing.NewRedis(tp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := newAPIOn(t, pool, func(cfg *httpapi.Config) {
		cfg.Tracer, cfg.Cache = tp, c
		// Every resolution goes through the cache, as on a fresh instance.
		cfg.KeyCacheTTL = -1
	})
	return a, rec
}

// A caller's trace: W3C traceparent, version 00, sampled.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
)

// serverSpan returns the one server span named name among spans.
func serverSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer && s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("%d server spans named %q, want 1; spans: %v", len(found), name, names)
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, k string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// descendants returns the spans under root, by their parents.
func descendants(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		for p := s.Parent(); p.IsValid(); {
			if p.SpanID() == root.SpanContext().SpanID() {
				out = append(out, s)
				break
			}
			up, ok := byID[p.SpanID()]
			if !ok {
				break
			}
			p = up.Parent()
		}
	}
	return out
}

// A spend sent with a caller's traceparent is a server span in the caller's
// trace, named after the route, with its method, route, status and tenant;
// its database statements and Redis commands are spans under it.
func TestTracingSpansRequestAndItsRoundTrips(t *testing.T) {
	t.Parallel()
	a, rec := tracedAPI(t)
	const payload = `{"account":"acct-1","amount":3}`
	tok := a.issue(a.client(), "trace-1", `{"operation":"ledger.credit","subject":"alice","ttl_seconds":600,"payload":`+payload+`}`)
	res := a.do(request{method: http.MethodPost, path: "/v1/tokens/consume", key: a.client(),
		body:   `{"token":"` + tok.Token + `","operation":"ledger.credit","subject":"alice","payload":` + payload + `}`,
		header: http.Header{"Traceparent": {"00-" + callerTraceID + "-" + callerSpanID + "-01"}}})
	if res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	spans := rec.Ended()
	s := serverSpan(t, spans, "POST /v1/tokens/consume")
	if got := s.SpanContext().TraceID().String(); got != callerTraceID {
		t.Errorf("trace id %s, want the caller's %s", got, callerTraceID)
	}
	if got := s.Parent(); !got.IsRemote() || got.SpanID().String() != callerSpanID {
		t.Errorf("parent %v, want the caller's span %s, remote", got, callerSpanID)
	}
	for k, want := range map[string]string{
		"http.route":                "/v1/tokens/consume",
		"http.request.method":       "POST",
		"http.response.status_code": "200",
		"tokend.tenant":             "acme",
	} {
		if v, ok := attr(s, k); !ok || v.Emit() != want {
			t.Errorf("attribute %s = %q (present %v), want %q", k, v.Emit(), ok, want)
		}
	}
	if s.Status().Code == codes.Error {
		t.Errorf("status %v on a 200", s.Status())
	}
	systems := map[string]int{}
	for _, c := range descendants(spans, s) {
		if v, ok := attr(c, "db.system.name"); ok {
			systems[v.AsString()]++
			if c.SpanKind() != trace.SpanKindClient || c.SpanContext().TraceID() != s.SpanContext().TraceID() {
				t.Errorf("span %s: kind %v, trace %s", c.Name(), c.SpanKind(), c.SpanContext().TraceID())
			}
		}
	}
	if systems["postgresql"] == 0 || systems["redis"] == 0 {
		t.Errorf("spans under the request by system: %v, want postgresql and redis", systems)
	}
	// The issue, sent without a traceparent, is a trace of its own.
	issue := serverSpan(t, spans, "POST /v1/tokens")
	if issue.Parent().IsValid() || issue.SpanContext().TraceID() == s.SpanContext().TraceID() {
		t.Errorf("the issue's span has parent %v, trace %s: want a root", issue.Parent(), issue.SpanContext().TraceID())
	}
}

// A caller's traceparent that says "not sampled" is honoured: the
// parent-based sampler records nothing of the request, nor of its round
// trips.
func TestTracingHonoursUnsampledParent(t *testing.T) {
	t.Parallel()
	a, rec := tracedAPI(t)
	key := a.client()
	before := len(rec.Ended())
	res := a.do(request{method: http.MethodGet, path: "/v1/tokens/tok_00000000000000000000000000", key: key,
		header: http.Header{"Traceparent": {"00-" + callerTraceID + "-" + callerSpanID + "-00"}}})
	if res.status != http.StatusNotFound {
		t.Fatalf("GET: %d %s", res.status, res.body)
	}
	if spans := rec.Ended()[before:]; len(spans) != 0 {
		t.Errorf("%d spans recorded under an unsampled parent, first %q", len(spans), spans[0].Name())
	}
}

// A refused request's span carries its problem code, and a 4xx is the
// client's error, not the span's; an unrouted path is named by its method
// only, never by the path.
func TestTracingNamesProblemAndNeverThePath(t *testing.T) {
	t.Parallel()
	a, rec := tracedAPI(t)
	wantProblem(t, a.get(a.client(), "/v1/tokens/tok_00000000000000000000000000"), http.StatusNotFound, "token_not_found")
	s := serverSpan(t, rec.Ended(), "GET /v1/tokens/:id")
	if v, _ := attr(s, "tokend.problem.code"); v.AsString() != "token_not_found" {
		t.Errorf("tokend.problem.code = %q, want token_not_found", v.AsString())
	}
	if s.Status().Code == codes.Error {
		t.Errorf("status %v on a 404", s.Status())
	}
	a.get(a.client(), "/no/such/route")
	s = serverSpan(t, rec.Ended(), "GET")
	if _, ok := attr(s, "http.route"); ok {
		t.Error("an unrouted request has an http.route")
	}
}

// No span, attribute, event or status of any request says a secret: not
// the API key, not a token secret, whether it came in a header, a body or
// (wrongly) the path.
func TestTracingRecordsNoSecret(t *testing.T) {
	t.Parallel()
	a, rec := tracedAPI(t)
	key := a.client()
	const payload = `{"account":"acct-2","amount":1}`
	tok := a.issue(key, "trace-secret", `{"operation":"ledger.credit","subject":"bob","ttl_seconds":600,"payload":`+payload+`}`)
	a.post(key, "/v1/tokens/consume", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"bob","payload":`+payload+`}`)
	// Spent again: the replay, and a mismatch.
	a.post(key, "/v1/tokens/consume", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"bob","payload":`+payload+`}`)
	a.post(key, "/v1/tokens/consume", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"eve","payload":`+payload+`}`)
	a.get(key, "/v1/tokens/"+tok.Token)
	a.get(key, "/v1/tokens?token="+tok.Token)
	a.get("bad"+key, "/v1/tokens/"+tok.ID)
	a.get(a.operator(), "/v1/admin/tokens/"+tok.ID)

	spans := rec.Ended()
	if len(spans) < 10 {
		t.Fatalf("%d spans, want the requests' and their round trips'", len(spans))
	}
	secrets := map[string]string{"API key": key, "operator key": a.operator(), "token secret": tok.Token}
	check := func(where, text string) {
		for name, secret := range secrets {
			if strings.Contains(text, secret) {
				t.Errorf("%s says the %s: %q", where, name, text)
			}
		}
	}
	for _, s := range spans {
		check("span name", s.Name())
		check("span status of "+s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			check("attribute "+string(kv.Key)+" of "+s.Name(), kv.Value.Emit())
		}
		for _, e := range s.Events() {
			check("event "+e.Name+" of "+s.Name(), e.Name)
			for _, kv := range e.Attributes {
				check("event attribute "+string(kv.Key)+" of "+s.Name(), kv.Value.Emit())
			}
		}
	}
}
