// Package httpapi serves tokend's REST API (v1) over the intent, consume,
// inspect and operation packages.
//
// Every route but the health checks authenticates with an API key; the
// tenant always comes from the key, never from the request. Errors are
// RFC 9457 problem details with a stable code.
//
// Route groups kept elsewhere (operator tools, metrics, pages) join through
// Config.Mounts and Config.Middleware; their handlers use Caller, Decode and
// Abort to behave like the built-in ones.
//
// The package is internal on purpose, with cmd/tokend as its one user. Its
// Config is built from tokend's plumbing (API keys, the caches, metrics), and
// exporting those would freeze them as public API. A program that talks HTTP
// to tokend uses the client package and the OpenAPI document. A program that
// embeds tokend calls intent, consume, inspect, admin and form inside its own
// transactions and serves its own routes.
package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/keyrate"
	"github.com/tokend/tokend/internal/serve/logredact"
	"github.com/tokend/tokend/internal/serve/metrics"
)

// DefaultMaxBodyBytes is Config.MaxBodyBytes's default.
const DefaultMaxBodyBytes = 64 << 10

// Config configures a Server.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Issuer issues tokens. Required.
	Issuer *intent.Issuer
	// Spender spends tokens. Required.
	Spender *consume.Spender
	// Logger receives one line per request and the detail of every internal
	// error, with token secrets and API keys redacted. Default slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Authenticate resolves a presented API key; it must return an error
	// wrapping apikey.ErrUnauthorized for a key that is not valid. Set it to
	// put a cache in front of the database. Default: apikey.Resolve on Pool.
	Authenticate func(ctx context.Context, presented string) (apikey.Key, error)
	// KeyCacheTTL is how long an API-key resolution is remembered in
	// process, in front of Authenticate. Unless Server.ForgetKey is told of
	// revocations, it bounds how long this instance keeps accepting a key
	// revoked elsewhere. Zero means DefaultKeyCacheTTL; negative turns the
	// in-process cache off.
	KeyCacheTTL time.Duration
	// Cache, when set, serves token reads and API-key resolutions from Redis
	// and turns away spends of tokens it knows are revoked or expired;
	// Postgres still decides every spend. /readyz reports it as an optional
	// dependency. Nil: no cache.
	Cache *cache.Cache
	// Metrics, when set, records every request and outcome and is served on
	// /metrics. Nil: no metrics.
	Metrics *metrics.Metrics
	// RateLimit bounds each API key's request rate; over it, requests are
	// answered 429 rate_limited with Retry-After. Default: no limit.
	RateLimit RateLimit
	// Checks are the dependencies /readyz reports on besides Postgres.
	Checks []Check
	// Middleware runs on every request, routed or not, after the request id
	// is set and before the body limit and authentication.
	Middleware []gin.HandlerFunc
	// Mounts add route groups, each called once by New after the built-in
	// routes are registered.
	Mounts []Mount
	// FeedWaiters parks the long polls of GET /v1/events. Default: a hub on
	// Pool with internal/serve/feedwait's defaults.
	FeedWaiters *feedwait.Hub
	// Tracer, when set, gives each request a server span (route, method,
	// status, tenant, problem code), a child of the caller's W3C
	// traceparent if one came, and puts it in the request's context, where
	// the database's and Redis's spans find their parent. Nil: no spans,
	// and no cost.
	Tracer trace.TracerProvider
	// FeedStallAfter is how long a transaction may stay open on the
	// database server before /readyz names it as a stall of the event feed
	// (without going unready). Default DefaultFeedStallAfter.
	FeedStallAfter time.Duration
}

// DefaultFeedStallAfter is Config.FeedStallAfter's default.
const DefaultFeedStallAfter = 30 * time.Second

// Check is a dependency /readyz reports on.
type Check struct {
	// Name identifies the dependency in the /readyz answer, e.g. "redis".
	Name string
	// Ping returns nil when the dependency is usable.
	Ping func(ctx context.Context) error
	// Optional dependencies only degrade the service when down: /readyz
	// still answers 200, with the dependency marked "degraded".
	Optional bool
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("httpapi: Config.Pool is required")
	case c.Issuer == nil:
		return errors.New("httpapi: Config.Issuer is required")
	case c.Spender == nil:
		return errors.New("httpapi: Config.Spender is required")
	case c.RateLimit.PerSecond < 0 || c.RateLimit.Burst < 0:
		return errors.New("httpapi: Config.RateLimit must not be negative")
	case c.FeedStallAfter < 0:
		return errors.New("httpapi: Config.FeedStallAfter must not be negative")
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("httpapi: Config.MaxBodyBytes is %d, want 0 (the default) or more", c.MaxBodyBytes)
	}
	seen := map[string]bool{postgresCheck: true, cacheCheck: c.Cache.Status() != cache.StatusOff}
	for _, ch := range c.Checks {
		if ch.Name == "" || ch.Ping == nil {
			return errors.New("httpapi: every Config.Checks entry needs a Name and a Ping")
		}
		if seen[ch.Name] {
			return fmt.Errorf("httpapi: Config.Checks names %q twice (or it is built in)", ch.Name)
		}
		seen[ch.Name] = true
	}
	return nil
}

// Server is the API as an http.Handler.
type Server struct {
	pool           *pgxpool.Pool
	issuer         *intent.Issuer
	spender        *consume.Spender
	log            *slog.Logger
	maxBodyBytes   int64
	authenticate   func(ctx context.Context, presented string) (apikey.Key, error)
	keys           *keyCache // nil: no in-process key cache
	checks         []Check
	limiter        *keyrate.Limiter // nil: no limit
	cache          *cache.Cache
	metrics        *metrics.Metrics
	feed           *feedwait.Hub
	ready          readyCache
	feedStallAfter time.Duration
	engine         *gin.Engine
	tracing        gin.HandlerFunc // nil: tracing off
}

// New returns a Server configured by cfg. It puts gin, process-wide, in
// release mode.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		pool:           cfg.Pool,
		issuer:         cfg.Issuer,
		spender:        cfg.Spender,
		log:            cfg.Logger,
		maxBodyBytes:   cfg.MaxBodyBytes,
		authenticate:   cfg.Authenticate,
		checks:         append([]Check{{Name: postgresCheck, Ping: cfg.Pool.Ping}}, cfg.Checks...),
		cache:          cfg.Cache,
		metrics:        cfg.Metrics,
		feed:           cfg.FeedWaiters,
		feedStallAfter: cmp.Or(cfg.FeedStallAfter, DefaultFeedStallAfter),
	}
	// Whatever logger it is given, no line of the server shows a secret a
	// client sent (internal/serve/logredact).
	s.log = logredact.Logger(s.log)
	if s.maxBodyBytes == 0 {
		s.maxBodyBytes = DefaultMaxBodyBytes
	}
	if s.feed == nil {
		var err error
		if s.feed, err = feedwait.New(feedwait.Config{Pool: cfg.Pool, Logger: s.log}); err != nil {
			return nil, err
		}
	}
	if s.authenticate == nil {
		s.authenticate = s.resolveCached
	}
	if ttl := cmp.Or(cfg.KeyCacheTTL, DefaultKeyCacheTTL); ttl > 0 {
		s.keys = newKeyCache(ttl, s.authenticate)
		s.authenticate = s.keys.authenticate
	}
	if cfg.Cache.Status() != cache.StatusOff {
		s.checks = append(s.checks, Check{Name: cacheCheck, Optional: true, Ping: cfg.Cache.Probe})
	}
	if cfg.Tracer != nil {
		s.tracing = traceRequests(cfg.Tracer, propagation.TraceContext{})
	}
	middleware, mounts := cfg.Middleware, cfg.Mounts
	if cfg.Metrics != nil {
		middleware = append([]gin.HandlerFunc{cfg.Metrics.Middleware()}, middleware...)
		mounts = append([]Mount{func(r Routes) { r.Public.GET("/metrics", s.metricsRoute) }}, mounts...)
	}
	if cfg.RateLimit.enabled() {
		s.limiter = newKeyLimiter(cfg.RateLimit)
	}
	s.engine = s.routes(middleware, mounts)
	return s, nil
}

// Drain ends every parked long poll of the event feed at once, each with
// the page as it is (an empty one keeps the cursor), and makes later ones
// answer without waiting: call it when shutting down (http.Server's
// RegisterOnShutdown), so that the shutdown waits for none of them.
func (s *Server) Drain() { s.feed.Close() }

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }
