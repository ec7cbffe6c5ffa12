package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/logredact"
)

// RequestIDHeader carries the id that ties a response to its log line. A
// well-formed id sent by the client (or a proxy) is kept; otherwise one is made.
const RequestIDHeader = "X-Request-Id"

// Keys of the values middleware leaves on a gin.Context.
const (
	requestIDKey = "tokend.request_id"
	callerKey    = "tokend.caller"
	codeKey      = "tokend.problem_code"
)

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func (s *Server) requestID(c *gin.Context) {
	id := c.GetHeader(RequestIDHeader)
	if !requestIDRE.MatchString(id) {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	c.Set(requestIDKey, id)
	c.Request = c.Request.WithContext(withRequestID(c.Request.Context(), id))
	c.Header(RequestIDHeader, id)
	c.Next()
}

// accessLog writes one line per request. It logs what identifies the request
// and its outcome, never headers, bodies or query strings: they carry keys,
// token secrets and end users' data. The path is logged with any secret in
// it redacted (the server's logger is a logredact.Handler), and a secret in
// the URL is reported first, by watchURL.
func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	s.watchURL(c)
	c.Next()
	status := c.Writer.Status()
	attrs := []slog.Attr{
		slog.String("request_id", c.GetString(requestIDKey)),
		slog.String("method", c.Request.Method),
		slog.String("route", c.FullPath()),
		slog.String("path", c.Request.URL.Path),
		slog.Int("status", status),
		slog.Int("bytes", max(c.Writer.Size(), 0)),
		slog.Duration("duration", time.Since(start)),
	}
	// The trace a sampled request's spans were exported under, to go from
	// the line to the trace.
	if sc := trace.SpanContextFromContext(c.Request.Context()); sc.IsSampled() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if k, ok := c.Get(callerKey); ok {
		k := k.(apikey.Key)
		attrs = append(attrs, slog.String("tenant", k.Tenant), slog.String("key_id", k.ID))
	}
	if code := c.GetString(codeKey); code != "" {
		attrs = append(attrs, slog.String("code", code))
	}
	level := slog.LevelInfo
	if err := c.Errors.Last(); err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
		level = slog.LevelError
	}
	logLine(c.Request.Context(), s.log.Handler(), level, "request", attrs)
}

// logLine is slog.Logger.LogAttrs without the caller's program counter: the
// logger would take it with runtime.Callers on every record, for a source
// no handler of tokend's prints (tokend serve's JSON handler has no
// AddSource) and that would name this file's line on every access line.
func logLine(ctx context.Context, h slog.Handler, level slog.Level, msg string, attrs []slog.Attr) {
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}

// watchURL counts and logs, at WARN with the request id, a request whose
// path or query holds a token secret or an API key: proxies, browser
// histories and access logs keep URLs, so the secret should be taken as
// leaked. The value itself is never logged.
func (s *Server) watchURL(c *gin.Context) {
	u := c.Request.URL
	query, err := url.QueryUnescape(u.RawQuery)
	if err != nil {
		query = ""
	}
	for _, part := range []struct {
		name  string
		found bool
	}{
		{"path", logredact.Contains(u.Path) || logredact.Contains(u.RawPath)},
		{"query", logredact.Contains(u.RawQuery) || logredact.Contains(query)},
	} {
		if !part.found {
			continue
		}
		s.metrics.ObserveSecretInURL(part.name)
		s.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "secret in URL",
			slog.String("request_id", c.GetString(requestIDKey)),
			slog.String("method", c.Request.Method),
			slog.String("part", part.name),
			slog.String("advice", "a token secret or API key was sent in the URL; treat it as leaked: revoke the token or the key"))
	}
}

// recoverPanic turns a handler's panic into a logged 500.
func (s *Server) recoverPanic(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
			panic(v) // net/http's way to abort a response; it handles it
		}
		err := fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		if c.Writer.Written() {
			_ = c.Error(err)
			c.Abort()
			return
		}
		Abort(c, err)
	}()
	c.Next()
}

// oneReading refuses, on every route, a request that repeats a header
// tokend reads or whose body is encoded (checkOneReading). A path that
// matches no route is left to the 404.
func oneReading(c *gin.Context) {
	if c.FullPath() != "" {
		if err := checkOneReading(c.Request.Header); err != nil {
			Abort(c, err)
			return
		}
	}
	c.Next()
}

// limitBody bounds every request body; reading past the bound fails with an
// *http.MaxBytesError, which Decode reports as 413.
func (s *Server) limitBody(c *gin.Context) {
	if c.Request.ContentLength > s.maxBodyBytes {
		Abort(c, &http.MaxBytesError{Limit: s.maxBodyBytes})
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.maxBodyBytes)
	c.Next()
}
