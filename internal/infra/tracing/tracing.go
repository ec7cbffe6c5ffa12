// Package tracing sets up OpenTelemetry traces for tokend serve: the
// provider and its OTLP exporter from the standard OTEL_* variables, and
// the child spans of database and Redis round trips.
//
// Tracing is off unless the environment turns it on (Enabled). Off, tokend
// installs none of this package's hooks, so a request costs what it did
// before tracing existed.
//
// No span attribute carries a secret: request spans (internal/serve/httpapi)
// name the route template, never the path; database spans carry the
// statement's text, which is a constant with placeholders, never its
// arguments; Redis spans carry the command's name, never its keys or values.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES names another.
const DefaultServiceName = "tokend"

// instrumentation names the tracer of every span this package and httpapi
// make.
const instrumentation = "github.com/tokend/tokend"

// Enabled reports whether the environment turns tracing on: OTEL_SDK_DISABLED
// is not true, and OTEL_TRACES_EXPORTER is otlp, or it is unset and an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is. The specification's default exporter is otlp; tokend's is none, so that
// a process with no collector exports nothing. Another exporter than otlp or
// none, or a protocol the exporter lacks, is an error, said at start.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "otlp":
		on = true
	case "none":
		return false, nil
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: tokend exports traces with otlp only (or none)", exp)
	}
	if !on {
		return false, nil
	}
	if _, err := protocol(getenv); err != nil {
		return false, err
	}
	return true, nil
}

// protocol is the OTLP protocol the environment asks for:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else
// http/protobuf (the specification's default).
func protocol(getenv func(string) string) (string, error) {
	p := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if p == "" {
		p = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return p, nil
	default:
		return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", p)
	}
}

// Tracing is the tracer provider tokend serve exports its spans through.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Start builds the provider when Enabled says so, and returns nil (tracing
// off) otherwise. The OTLP exporter reads its own OTEL_EXPORTER_OTLP_*
// variables (endpoint, headers, TLS, timeout, compression), the SDK its
// OTEL_TRACES_SAMPLER(_ARG) (default parentbased_always_on) and OTEL_BSP_*,
// and the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Nothing
// is dialed here: a collector that is down costs dropped spans, logged by
// otel's error handler, never a refused start.
func Start(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	proto, _ := protocol(getenv)
	var exp sdktrace.SpanExporter
	if proto == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := newResource(ctx)
	if err != nil {
		return nil, err
	}
	return &Tracing{provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

// newResource describes the process: service.name tokend unless the
// environment says otherwise (the env detector runs last, so it wins).
func newResource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return res, nil
}

// Provider returns the tracer provider; nil Tracing (off) gives nil.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Shutdown exports the spans still buffered and stops the exporter, giving
// up when ctx ends. Nil Tracing does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
