package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokend/tokend/internal/infra/tracing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Tracing is off unless the standard variables turn it on, and off when
// OTEL_SDK_DISABLED says so whatever else is set.
func TestEnabledOnlyByTheVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"unrelated OTEL variables", map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter none beats an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{"SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"SDK disabled, any case", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"SDK not disabled", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, true},
	} {
		got, err := tracing.Enabled(env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("%s: Enabled = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	tr, err := tracing.Start(context.Background(), env(nil))
	if tr != nil || err != nil || tr.Provider() != nil || tr.DB() != nil || tr.Redis() != nil {
		t.Errorf("Start without variables = %v, %v: want nil (off), with nil hooks", tr, err)
	}
}

// What tokend cannot do is refused at start, not ignored.
func TestEnabledRefusesWhatItCannotExport(t *testing.T) {
	t.Parallel()
	for _, e := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
	} {
		if on, err := tracing.Enabled(env(e)); err == nil {
			t.Errorf("%v: Enabled = %v, nil; want an error", e, on)
		}
	}
}

// Started from the variables, the provider names the service tokend unless
// OTEL_SERVICE_NAME says otherwise, carries OTEL_RESOURCE_ATTRIBUTES, and
// shuts down within its context even with no collector listening.
func TestStartReadsTheResourceFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct{ serviceName, want string }{{"", "tokend"}, {"tokend-eu", "tokend-eu"}} {
		t.Setenv("OTEL_SERVICE_NAME", tc.serviceName)
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens
		tr, err := tracing.Start(context.Background(), func(k string) string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
		})
		if err != nil || tr == nil {
			t.Fatalf("Start: %v, %v", tr, err)
		}
		p := tr.Provider().(*sdktrace.TracerProvider)
		rec := tracetest.NewSpanRecorder()
		p.RegisterSpanProcessor(rec)
		_, span := p.Tracer("test").Start(context.Background(), "x")
		span.End()
		res := rec.Ended()[0].Resource()
		if v, _ := res.Set().Value("service.name"); v.AsString() != tc.want {
			t.Errorf("OTEL_SERVICE_NAME=%q: service.name %q, want %q", tc.serviceName, v.AsString(), tc.want)
		}
		if v, _ := res.Set().Value(attribute.Key("deployment.environment.name")); v.AsString() != "test" {
			t.Errorf("deployment.environment.name %q, want test from OTEL_RESOURCE_ATTRIBUTES", v.AsString())
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // flushing gives up at once: Shutdown is bounded by its context
		_ = tr.Shutdown(ctx)
	}
}
