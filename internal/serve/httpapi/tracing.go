package httpapi

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// Span attributes of tokend's own.
const (
	tenantAttr  = attribute.Key("tokend.tenant")
	problemAttr = attribute.Key("tokend.problem.code")
)

// methods are the methods a span names as they are; any other is _OTHER,
// as the semantic conventions ask (a client chooses the method).
var methods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true}

// traceRequests starts a server span per request, a child of the caller's
// when a valid W3C traceparent came with it (whether it is recorded is the
// sampler's call: parent-based by default). The span is named after the
// route's template, never the path, and carries the method, the route, the
// status, the tenant once the key is resolved and the problem code of an
// error: nothing the client sent but the method and the traceparent, so
// never a token secret or API key.
func traceRequests(tp trace.TracerProvider, prop propagation.TextMapPropagator) gin.HandlerFunc {
	tracer := tp.Tracer("github.com/tokend/tokend")
	return func(c *gin.Context) {
		ctx := prop.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
		method := c.Request.Method
		if !methods[method] {
			method = "_OTHER"
		}
		route, name := c.FullPath(), method
		attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method)}
		if route != "" {
			name += " " + route
			attrs = append(attrs, semconv.HTTPRoute(route))
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		status := c.Writer.Status()
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if k, ok := c.Get(callerKey); ok {
			span.SetAttributes(tenantAttr.String(k.(apikey.Key).Tenant))
		}
		if code := c.GetString(codeKey); code != "" {
			span.SetAttributes(problemAttr.String(code))
		}
		// A server span is an error for a 5xx only: a 4xx is the client's.
		if status >= 500 {
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
			span.SetStatus(codes.Error, c.GetString(codeKey))
		}
	}
}
