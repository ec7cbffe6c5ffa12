package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/internal/serve/demo"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/ledgerapi"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/internal/serve/webhookapi"
	"github.com/tokend/tokend/token"
)

// newAPI assembles everything tokend serves: the REST API with its metrics
// and (when TOKEND_REDIS_URL is set) its cache, the operator console under
// /console and, only when cfg.Demo is set, the demo app under /demo. Until
// ctx ends or release is called, the server listens for API-key revocations
// made anywhere and drops its cached resolution of each at once. release
// stops that and closes the cache.
// listen is where the API-key watcher LISTENs: pool itself, unless pool goes
// through a transaction-pooling proxy.
func newAPI(ctx context.Context, cfg serveConfig, pool, listen *pgxpool.Pool, keys *token.Keyring, spender *consume.Spender, hooks *dispatch.Dispatcher, log *slog.Logger) (api *httpapi.Server, release func(), err error) {
	m, err := metrics.New(metrics.Config{Pool: pool, Stats: func(ctx context.Context) (metrics.Stats, error) {
		s, err := admin.Unresolved(ctx, pool)
		return metrics.Stats(s), err
	}})
	if err != nil {
		return nil, nil, err
	}
	if err := m.Register(metrics.Cached(hooks.Collectors()...)...); err != nil {
		return nil, nil, err
	}
	// Entries are authenticated under a key derived from the server key,
	// which every instance sharing the Redis has; previous keys are still
	// read, so that a rolling rotation does not read as forgery.
	var previousMACs [][]byte
	for _, k := range cfg.PreviousSecretKeys {
		previousMACs = append(previousMACs, cache.MACKey([]byte(k)))
	}
	c, err := cache.New(cache.Config{URL: cfg.RedisURL, Observer: m, Logger: log, RequestID: httpapi.RequestID, Hook: cfg.traces.Redis(),
		MACKey: cache.MACKey([]byte(cfg.SecretKey)), PreviousMACKeys: previousMACs})
	if err != nil {
		return nil, nil, usageError{err}
	}
	release = func() { _ = c.Close() }
	log.Info("lookup cache", "status", string(c.Status()))

	// The handlers also check payloads at issue, so no token is issued that
	// its handler would refuse at spend.
	issuer := intent.NewIssuer(keys, intent.WithHandlers(spender.Handlers()))
	var demoApp *demo.App
	if cfg.Demo {
		if demoApp, err = demo.New(demo.Config{Pool: pool, Issuer: issuer, Spender: spender, SecretKey: cfg.SecretKey, Logger: log,
			Changed: func(ctx context.Context, tenant string, r consume.Response) {
				c.Invalidate(ctx, tenant, r.TokenID, r.State, r.Generation)
			},
		}); err != nil {
			release()
			return nil, nil, err
		}
		log.Warn("demo app on at /demo: anyone can sign in and have tokens issued; turn TOKEND_DEMO off on a production server")
	}
	ops, err := console.New(console.Config{Pool: pool, SecretKey: cfg.SecretKey, Logger: log, SecretOverlap: cfg.WebhookSecretOverlap,
		// The API's rate limit, per API key: the server is made below,
		// before any request.
		Allow:   func(ctx context.Context, keyID string) (bool, time.Duration) { return api.Allow(ctx, keyID) },
		Changed: func(ctx context.Context, r token.Record) { c.Invalidate(ctx, r.Tenant, r.ID, r.State, r.Generation) },
	})
	if err != nil {
		release()
		return nil, nil, err
	}
	// One hub parks every long poll of the event feed; it LISTENs where the
	// API-key watcher does.
	feed, err := feedwait.New(feedwait.Config{Pool: pool, Listen: listen, Logger: log})
	if err == nil {
		err = m.Register(feed.Collectors()...)
	}
	if err != nil {
		release()
		return nil, nil, err
	}
	api, err = httpapi.New(httpapi.Config{
		FeedWaiters: feed,
		Pool:        pool,
		Issuer:      issuer,
		Spender:     spender,
		Logger:      log,
		Cache:       c,
		Metrics:     m,
		Tracer:      cfg.traces.Provider(),
		RateLimit:   httpapi.RateLimit{PerSecond: cfg.RateLimit},
		Mounts: []httpapi.Mount{ledgerapi.Mount(pool), webhookapi.Mount(pool, keys, dispatch.Options{AllowedHosts: cfg.WebhookAllowedHosts,
			MaxEndpoints: cfg.WebhookMaxEndpoints, SecretOverlap: cfg.WebhookSecretOverlap}), func(r httpapi.Routes) {
			links := []console.Link{
				{Path: "/openapi.json", Name: "API reference", About: "the OpenAPI 3.1 document of the REST API."},
				{Path: "/healthz", Name: "Liveness", About: "200 while the process serves."},
				{Path: "/readyz", Name: "Readiness", About: "200 while the database answers; says when the cache is degraded."},
				{Path: "/metrics", Name: "Metrics", About: "Prometheus text."},
			}
			if demoApp != nil {
				demoApp.Mount(r.Public)
				links = append([]console.Link{{Path: "/demo", Name: "Demo app", About: "a top-up form whose submits spend one-time tokens (TOKEND_DEMO is on)."}}, links...)
			}
			ops.Mount(r.Public)
			ops.MountIndex(r.Public, links...)
		}},
	})
	if err != nil {
		release()
		return nil, nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = apikey.Watch(watchCtx, listen, func(keyHash []byte) { api.ForgetKey(watchCtx, keyHash) }, api.ForgetAllKeys, log)
	}()
	closeCache := release
	release = func() {
		stopWatch()
		<-watched
		closeCache()
	}
	return api, release, nil
}
