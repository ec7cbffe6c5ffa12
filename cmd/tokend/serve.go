package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/infra/tracing"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/logredact"
	"github.com/tokend/tokend/token"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg serveConfig
	if err := parseFlags("serve", args, getenv, stderr, cfg.bind); err != nil {
		return err
	}
	cfg.readKeys(getenv)
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	keys, err := token.NewKeyring(cfg.SecretKey, cfg.PreviousSecretKeys...)
	if err != nil {
		return usageError{err}
	}
	// Every line the process writes goes through one redacting handler: a
	// token secret or API key a client sends never reaches the log. The
	// log package's and gin's own output are routed through it too.
	log := slog.New(logredact.New(slog.NewJSONHandler(stderr, nil)))
	slog.SetDefault(log)
	gin.DefaultWriter = slog.NewLogLogger(log.Handler(), slog.LevelInfo).Writer()
	gin.DefaultErrorWriter = slog.NewLogLogger(log.Handler(), slog.LevelError).Writer()
	cache.LogRedisTo(log)
	// Key ids, never keys: the WARN lines of refused spends name the
	// retired key's id, to be matched against this line.
	log.Info("server keys", "current", keys.CurrentKeyID(), "previous", keys.KeyIDs()[1:])

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Tracing is off unless the OTEL_* variables turn it on. The exporter
	// and the SDK read their own variables from the process's environment.
	if cfg.traces, err = tracing.Start(ctx, getenv); err != nil {
		return usageError{err}
	}
	if cfg.traces != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "error", err.Error()) }))
		cfg.tracer = cfg.traces.DB()
		log.Info("tracing on", "exporter", "otlp")
		// Deferred first, so it runs last: after the pool and the
		// dispatcher stop, the spans they ended are flushed, for at most
		// traceFlushTimeout.
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
			defer cancel()
			if err := cfg.traces.Shutdown(fctx); err != nil {
				log.Warn("tracing: spans not flushed", "error", err.Error())
			}
		}()
	}

	if err := cfg.checkRole(ctx, getenv(allowSuperuserVar) == "1", log); err != nil {
		return err
	}
	if _, err := cfg.applyMigrations(ctx, log); err != nil {
		return err
	}
	pool, err := newPool(ctx, cfg.dbConfig, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	handlers := consume.NewRegistry()
	ledger.Register(handlers)
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		return err
	}
	hooks, err := dispatch.New(dispatch.Config{Pool: pool, Keys: keys, Timeout: cfg.WebhookTimeout,
		Lease: 3 * cfg.WebhookTimeout, MaxAge: cfg.WebhookMaxAge, DisableAfter: cfg.WebhookDisableAfter,
		AllowedHosts: cfg.WebhookAllowedHosts, EndpointConcurrency: cfg.WebhookEndpointConcurrency,
		TenantConcurrency: cfg.WebhookTenantConcurrency, Proxy: cfg.webhookProxy, Logger: log, Tracer: cfg.traces.Provider()})
	if err != nil {
		return err
	}
	// LISTEN needs a session of its own, which a transaction-pooling proxy
	// does not give: the watcher then connects through the session URL.
	listen := pool
	if cfg.Pooling == poolingTransaction {
		session := cfg.dbConfig
		session.Pooling = poolingSession
		if listen, err = newPool(ctx, session, cfg.SessionURL); err != nil {
			return fmt.Errorf("TOKEND_DATABASE_SESSION_URL: %w", err)
		}
		defer listen.Close()
	}
	api, closeAPI, err := newAPI(ctx, cfg, pool, listen, keys, spender, hooks, log)
	if err != nil {
		return err
	}
	defer closeAPI()
	hooksCtx, stopHooks := context.WithCancel(ctx)
	hooksDone := make(chan struct{})
	go func() {
		defer close(hooksDone)
		_ = hooks.Run(hooksCtx) // returns only when hooksCtx ends
	}()
	defer func() { stopHooks(); <-hooksDone }() // before the deferred pool.Close
	stopSweeper, err := startSweeper(ctx, pool, cfg.SweepInterval, cfg.EventRetention, log)
	if err != nil {
		return err
	}
	defer stopSweeper() // runs before the deferred pool.Close

	if cfg.DebugListen != "" {
		stopDebug, err := serveDebug(cfg.DebugListen, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}

	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10, // an API request needs a few hundred bytes of headers
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Parked long polls answer at once on shutdown: their clients resume
	// from the cursor, elsewhere or after the restart.
	srv.RegisterOnShutdown(api.Drain)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	log.Info("listening", "addr", ln.Addr().String(), "max_db_conns", pool.Config().MaxConns)
	served := make(chan error, 1)
	// net/http's own refusals (431, 400) answer problem+json too.
	go func() { served <- srv.Serve(httpapi.ProblemListener(ln)) }()

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process at once
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())

	// New connections are refused at once; requests in flight keep their
	// database connections until they finish or the timeout passes.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: requests still running after %s: %w", cfg.ShutdownTimeout, err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	stopSweeper()
	pool.Close()
	log.Info("stopped")
	return nil
}

// traceFlushTimeout bounds the export of the spans still buffered at
// shutdown: a collector that does not answer must not hold the exit up.
const traceFlushTimeout = 5 * time.Second

// minPoolConns is the floor of the default pool: enough transactions in
// flight to fill a group commit while the one before it waits for its WAL
// flush, however few CPUs tokend has. A spend holds its connection through
// its commit, so with few CPUs (tokend pinned to one: 4 connections) the
// pool, not Postgres, bounded the rate. Measured on the pinned split of
// issue 33 (Postgres on one core, the spends on the other, C = 32,
// scripts/bench-cpu pool): 8 connections gave the best rate, 1.7x that of
// 4, at the same Postgres CPU per spend; 16 and 32 gave less and cost
// Postgres 1.5x and 1.7x the CPU per spend (bench/results/issue33.md).
const minPoolConns = 8

// defaultMaxConns is the pool's size unless the URL sets pool_max_conns: a
// few connections per CPU, so the CPUs stay busy without queueing in
// Postgres, and never fewer than minPoolConns, which commit latency needs.
func defaultMaxConns(procs int) int32 { return int32(max(4*procs, minPoolConns)) }

// newPool opens a pool sized for the machine (defaultMaxConns).
// pool_max_conns and pool_min_conns in the URL take precedence.
func newPool(ctx context.Context, db dbConfig, url string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, parseError("database URL", url, err)
	}
	db.applyPoolConfig(pc)
	if !strings.Contains(url, "pool_max_conns") {
		pc.MaxConns = defaultMaxConns(runtime.GOMAXPROCS(0))
	}
	if !strings.Contains(url, "pool_min_conns") {
		pc.MinConns = 2
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}
