package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/infra/tracing"
	"github.com/tokend/tokend/token"
)

// Defaults of serveConfig.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultShutdownTimeout = 15 * time.Second
	defaultRateLimit       = 1000 // requests per second per API key
)

// dbConfig is what every subcommand needs: where the database is.
type dbConfig struct {
	DatabaseURL string // TOKEND_DATABASE_URL or --database-url; required
	// Pooling is TOKEND_DATABASE_POOLING: session (default; Postgres itself,
	// or a pooler in session mode) or transaction (a pooler in transaction
	// mode, such as PgBouncer's pool_mode = transaction).
	Pooling string
	// SessionURL (TOKEND_DATABASE_SESSION_URL) reaches the same database
	// with a session of its own, for migrations and LISTEN; required with
	// transaction pooling. Default: DatabaseURL.
	SessionURL string
	// MigrationLockTimeout (TOKEND_MIGRATION_LOCK_TIMEOUT) bounds the wait
	// for a lock while migrating. Default: defaultMigrationLockTimeout.
	MigrationLockTimeout time.Duration
	// tracer, when tracing is on (serve only), makes a span of each
	// statement a traced request runs.
	tracer *tracing.DB
}

func (c *dbConfig) bind(fs *flag.FlagSet, env envFlags) {
	// Flag defaults stay empty: -h prints defaults, and the URL may hold a password.
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL (env TOKEND_DATABASE_URL)")
	env["database-url"] = "TOKEND_DATABASE_URL"
	fs.StringVar(&c.Pooling, "database-pooling", poolingSession, "session, or transaction behind a pooler in transaction mode such as PgBouncer's (env TOKEND_DATABASE_POOLING)")
	env["database-pooling"] = "TOKEND_DATABASE_POOLING"
	fs.StringVar(&c.SessionURL, "database-session-url", "", "Postgres URL with sessions of their own, for migrations and LISTEN; required with transaction pooling (env TOKEND_DATABASE_SESSION_URL)")
	env["database-session-url"] = "TOKEND_DATABASE_SESSION_URL"
	fs.DurationVar(&c.MigrationLockTimeout, "migration-lock-timeout", defaultMigrationLockTimeout, "how long migrating waits for a lock another session holds (env TOKEND_MIGRATION_LOCK_TIMEOUT)")
	env["migration-lock-timeout"] = "TOKEND_MIGRATION_LOCK_TIMEOUT"
}

// Validate reports what is wrong with c.
func (c dbConfig) Validate() error {
	if c.DatabaseURL == "" {
		return errors.New("TOKEND_DATABASE_URL (or --database-url) is required")
	}
	// The error never quotes the URL: parseError.
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return parseError("TOKEND_DATABASE_URL", c.DatabaseURL, err)
	}
	switch c.Pooling {
	case poolingSession, "":
	case poolingTransaction:
		if c.SessionURL == "" {
			return errors.New("TOKEND_DATABASE_POOLING=transaction needs TOKEND_DATABASE_SESSION_URL: migrations and LISTEN need a session of their own, which a transaction-pooling proxy does not give")
		}
	default:
		return fmt.Errorf("TOKEND_DATABASE_POOLING %q: want session or transaction", c.Pooling)
	}
	if c.SessionURL != "" {
		if _, err := pgxpool.ParseConfig(c.SessionURL); err != nil {
			return parseError("TOKEND_DATABASE_SESSION_URL", c.SessionURL, err)
		}
	}
	if c.MigrationLockTimeout < 0 {
		return fmt.Errorf("TOKEND_MIGRATION_LOCK_TIMEOUT %s: want a positive duration, e.g. 1m", c.MigrationLockTimeout)
	}
	return nil
}

// serveConfig configures `tokend serve`.
type serveConfig struct {
	dbConfig
	Listen          string        // TOKEND_LISTEN or --listen; default defaultListen
	RedisURL        string        // TOKEND_REDIS_URL or --redis-url; optional
	ShutdownTimeout time.Duration // TOKEND_SHUTDOWN_TIMEOUT or --shutdown-timeout; default defaultShutdownTimeout
	RateLimit       float64       // TOKEND_RATE_LIMIT or --rate-limit, requests/s per API key, 0 for none; default defaultRateLimit
	SweepInterval   time.Duration // TOKEND_SWEEP_INTERVAL or --sweep-interval; default admin.DefaultSweepInterval
	EventRetention  time.Duration // TOKEND_EVENT_RETENTION or --event-retention; default admin.DefaultEventRetention
	// Webhook delivery: TOKEND_WEBHOOK_TIMEOUT, _MAX_AGE, _DISABLE_AFTER,
	// _ALLOWED_HOSTS (comma-separated host names, addresses and CIDRs;
	// empty: any public address, never a loopback, private or other
	// forbidden one; set: only those, forbidden or not).
	WebhookTimeout      time.Duration
	WebhookMaxAge       time.Duration
	WebhookDisableAfter time.Duration
	WebhookAllowedHosts []string
	// WebhookProxy is TOKEND_WEBHOOK_PROXY as given; webhookProxy what it
	// says, read with the standard proxy variables when it is "env".
	WebhookProxy    string
	webhookProxy    dispatch.ProxyFunc
	webhookProxyErr error
	// TOKEND_WEBHOOK_MAX_ENDPOINTS (endpoints per tenant, default 32),
	// _SECRET_OVERLAP (a rotated-out secret signs beside the new one,
	// default 24h), _ENDPOINT_CONCURRENCY and _TENANT_CONCURRENCY
	// (deliveries in flight per endpoint and per tenant across instances,
	// default 4 and 16).
	WebhookMaxEndpoints        int
	WebhookSecretOverlap       time.Duration
	WebhookEndpointConcurrency int
	WebhookTenantConcurrency   int
	// DebugListen, when set (TOKEND_DEBUG_LISTEN or --debug-listen), serves
	// Go's profiler at /debug/pprof/ on a listener of its own, so it is
	// never reachable through the API's address. Default: off.
	DebugListen string
	// Demo, when set (TOKEND_DEMO=1 or --demo), serves the demo app under
	// /demo: anyone can sign in there with a made-up name and have tokens
	// issued, so it is for a developer's machine. Default: off.
	Demo bool
	// SecretKey derives token secrets (TOKEND_SECRET_KEY, at least
	// token.MinKeyLen bytes); PreviousSecretKeys (TOKEND_PREVIOUS_SECRET_KEYS,
	// comma-separated or one per line) are the keys rotated out, still needed to re-issue
	// tokens derived under them. Keys come from the environment only: a
	// command line is visible to every user of the machine.
	SecretKey          string
	PreviousSecretKeys []string
	previousKeysFile   string // TOKEND_PREVIOUS_SECRET_KEYS_FILE, to name in errors
	// traces is OpenTelemetry tracing, on when the standard OTEL_*
	// variables turn it on (tracing.Enabled); nil: off.
	traces *tracing.Tracing
}

func (c *serveConfig) bind(fs *flag.FlagSet, env envFlags) {
	c.dbConfig.bind(fs, env)
	fs.StringVar(&c.Listen, "listen", defaultListen, "address to serve on (env TOKEND_LISTEN)")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL of the lookup cache, optional (env TOKEND_REDIS_URL)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long in-flight requests may take to finish on SIGTERM (env TOKEND_SHUTDOWN_TIMEOUT)")
	env["listen"] = "TOKEND_LISTEN"
	env["redis-url"] = "TOKEND_REDIS_URL"
	fs.Float64Var(&c.RateLimit, "rate-limit", defaultRateLimit, "requests per second per API key, bursts of twice that; 0 for no limit (env TOKEND_RATE_LIMIT)")
	env["shutdown-timeout"] = "TOKEND_SHUTDOWN_TIMEOUT"
	env["rate-limit"] = "TOKEND_RATE_LIMIT"
	fs.DurationVar(&c.SweepInterval, "sweep-interval", admin.DefaultSweepInterval, "how often to expire and purge tokens past their retention (env TOKEND_SWEEP_INTERVAL)")
	env["sweep-interval"] = "TOKEND_SWEEP_INTERVAL"
	fs.DurationVar(&c.EventRetention, "event-retention", admin.DefaultEventRetention, "how long token events are kept once their token is purged, for the feed and webhooks (env TOKEND_EVENT_RETENTION)")
	env["event-retention"] = "TOKEND_EVENT_RETENTION"
	fs.DurationVar(&c.WebhookTimeout, "webhook-timeout", dispatch.DefaultTimeout, "how long one webhook delivery may take; a dispatcher's lease on a delivery is three times that (env TOKEND_WEBHOOK_TIMEOUT)")
	env["webhook-timeout"] = "TOKEND_WEBHOOK_TIMEOUT"
	fs.DurationVar(&c.WebhookMaxAge, "webhook-max-age", dispatch.DefaultMaxAge, "how long a webhook delivery is retried before it fails for good (env TOKEND_WEBHOOK_MAX_AGE)")
	env["webhook-max-age"] = "TOKEND_WEBHOOK_MAX_AGE"
	fs.DurationVar(&c.WebhookDisableAfter, "webhook-disable-after", dispatch.DefaultDisableAfter, "disable a webhook endpoint whose every delivery failed for this long (env TOKEND_WEBHOOK_DISABLE_AFTER)")
	env["webhook-disable-after"] = "TOKEND_WEBHOOK_DISABLE_AFTER"
	fs.Func("webhook-allowed-hosts", "comma-separated host names, IP addresses and CIDRs webhooks may be sent to, even when private; empty: any public address (env TOKEND_WEBHOOK_ALLOWED_HOSTS)", func(s string) error {
		c.WebhookAllowedHosts = nil
		for h := range strings.SplitSeq(s, ",") {
			if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
				c.WebhookAllowedHosts = append(c.WebhookAllowedHosts, h)
			}
		}
		return nil
	})
	env["webhook-allowed-hosts"] = "TOKEND_WEBHOOK_ALLOWED_HOSTS"
	fs.StringVar(&c.WebhookProxy, "webhook-proxy", "", "an http://host:port egress proxy webhooks go through, or env for HTTPS_PROXY, HTTP_PROXY and NO_PROXY; empty: direct (env TOKEND_WEBHOOK_PROXY)")
	env["webhook-proxy"] = "TOKEND_WEBHOOK_PROXY"
	fs.IntVar(&c.WebhookMaxEndpoints, "webhook-max-endpoints", dispatch.DefaultMaxEndpoints, "most webhook endpoints a tenant may register (env TOKEND_WEBHOOK_MAX_ENDPOINTS)")
	env["webhook-max-endpoints"] = "TOKEND_WEBHOOK_MAX_ENDPOINTS"
	fs.DurationVar(&c.WebhookSecretOverlap, "webhook-secret-overlap", dispatch.DefaultSecretOverlap, "how long a rotated-out webhook secret keeps signing beside the new one (env TOKEND_WEBHOOK_SECRET_OVERLAP)")
	env["webhook-secret-overlap"] = "TOKEND_WEBHOOK_SECRET_OVERLAP"
	fs.IntVar(&c.WebhookEndpointConcurrency, "webhook-endpoint-concurrency", dispatch.DefaultEndpointConcurrency, "most deliveries one webhook endpoint has in flight, on all instances (env TOKEND_WEBHOOK_ENDPOINT_CONCURRENCY)")
	env["webhook-endpoint-concurrency"] = "TOKEND_WEBHOOK_ENDPOINT_CONCURRENCY"
	fs.IntVar(&c.WebhookTenantConcurrency, "webhook-tenant-concurrency", dispatch.DefaultTenantConcurrency, "most deliveries one tenant's webhook endpoints have in flight, on all instances (env TOKEND_WEBHOOK_TENANT_CONCURRENCY)")
	env["webhook-tenant-concurrency"] = "TOKEND_WEBHOOK_TENANT_CONCURRENCY"
	fs.StringVar(&c.DebugListen, "debug-listen", "", "address for /debug/pprof/, off when empty; keep it on loopback (env TOKEND_DEBUG_LISTEN)")
	env["debug-listen"] = "TOKEND_DEBUG_LISTEN"
	fs.BoolVar(&c.Demo, "demo", false, "serve the demo app under /demo, where anyone may sign in; never on a production server (env TOKEND_DEMO=1)")
	env["demo"] = "TOKEND_DEMO"
}

// readKeys takes the server keys from the environment.
func (c *serveConfig) readKeys(getenv func(string) string) {
	c.webhookProxy, c.webhookProxyErr = dispatch.ParseProxy(c.WebhookProxy, getenv)
	c.SecretKey = getenv("TOKEND_SECRET_KEY")
	c.PreviousSecretKeys = nil
	// Comma-separated, or one per line (as a file of them is written most
	// naturally): a line break is never part of a key.
	for _, k := range strings.FieldsFunc(getenv("TOKEND_PREVIOUS_SECRET_KEYS"), func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if k = strings.TrimSpace(k); k != "" {
			c.PreviousSecretKeys = append(c.PreviousSecretKeys, k)
		}
	}
	c.previousKeysFile = getenv("TOKEND_PREVIOUS_SECRET_KEYS_FILE")
}

// previousKeysSource names where TOKEND_PREVIOUS_SECRET_KEYS came from, for
// its errors: the variable, and its file when read from one.
func (c serveConfig) previousKeysSource() string {
	if c.previousKeysFile != "" {
		return "TOKEND_PREVIOUS_SECRET_KEYS (file " + c.previousKeysFile + ")"
	}
	return "TOKEND_PREVIOUS_SECRET_KEYS"
}

// Validate reports what is wrong with c. Its messages never quote a key or
// a password.
func (c serveConfig) Validate() error {
	if err := c.dbConfig.Validate(); err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("TOKEND_LISTEN %q: want host:port, e.g. %s", c.Listen, defaultListen)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("TOKEND_LISTEN %q: want a numeric port from 0 to 65535", c.Listen)
	}
	if c.DebugListen != "" {
		if _, port, err := net.SplitHostPort(c.DebugListen); err != nil || port == "" {
			return fmt.Errorf("TOKEND_DEBUG_LISTEN %q: want host:port, e.g. 127.0.0.1:6060", c.DebugListen)
		}
	}
	if c.RedisURL != "" {
		u, err := url.Parse(c.RedisURL)
		if err != nil {
			return errors.New("TOKEND_REDIS_URL is not a URL")
		}
		if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" || u.Scheme != "unix" && u.Host == "" {
			return fmt.Errorf("TOKEND_REDIS_URL %q: want redis://host:port, rediss://host:port or unix:///path", u.Redacted())
		}
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("TOKEND_SHUTDOWN_TIMEOUT %s: want a positive duration, e.g. 15s", c.ShutdownTimeout)
	}
	if c.SweepInterval <= 0 {
		return fmt.Errorf("TOKEND_SWEEP_INTERVAL %s: want a positive duration, e.g. 1m", c.SweepInterval)
	}
	for name, d := range map[string]time.Duration{"TOKEND_WEBHOOK_TIMEOUT": c.WebhookTimeout,
		"TOKEND_WEBHOOK_MAX_AGE": c.WebhookMaxAge, "TOKEND_WEBHOOK_DISABLE_AFTER": c.WebhookDisableAfter} {
		if d <= 0 {
			return fmt.Errorf("%s %s: want a positive duration", name, d)
		}
	}
	if err := dispatch.CheckAllowedHosts(c.WebhookAllowedHosts); err != nil {
		return fmt.Errorf("TOKEND_WEBHOOK_ALLOWED_HOSTS: %w", err)
	}
	if c.webhookProxyErr != nil {
		return fmt.Errorf("TOKEND_WEBHOOK_PROXY: %w", c.webhookProxyErr)
	}
	for name, n := range map[string]int{"TOKEND_WEBHOOK_MAX_ENDPOINTS": c.WebhookMaxEndpoints,
		"TOKEND_WEBHOOK_ENDPOINT_CONCURRENCY": c.WebhookEndpointConcurrency, "TOKEND_WEBHOOK_TENANT_CONCURRENCY": c.WebhookTenantConcurrency} {
		if n <= 0 {
			return fmt.Errorf("%s %d: want a positive number", name, n)
		}
	}
	if c.WebhookSecretOverlap <= 0 {
		return fmt.Errorf("TOKEND_WEBHOOK_SECRET_OVERLAP %s: want a positive duration, e.g. 24h", c.WebhookSecretOverlap)
	}
	if c.EventRetention <= 0 {
		return fmt.Errorf("TOKEND_EVENT_RETENTION %s: want a positive duration, e.g. 168h", c.EventRetention)
	}
	if c.RateLimit < 0 {
		return fmt.Errorf("TOKEND_RATE_LIMIT %g: want requests per second, or 0 for no limit", c.RateLimit)
	}
	switch {
	case c.SecretKey == "":
		return fmt.Errorf("TOKEND_SECRET_KEY is required: at least %d bytes of random text, e.g. from `openssl rand -base64 48`", token.MinKeyLen)
	case len(c.SecretKey) < token.MinKeyLen:
		return fmt.Errorf("TOKEND_SECRET_KEY is %d bytes, want at least %d", len(c.SecretKey), token.MinKeyLen)
	}
	for i, k := range c.PreviousSecretKeys {
		switch {
		case len(k) < token.MinKeyLen:
			return fmt.Errorf("%s: key %d is %d bytes, want at least %d", c.previousKeysSource(), i+1, len(k), token.MinKeyLen)
		case strings.ContainsFunc(k, unicode.IsControl):
			return fmt.Errorf("%s: key %d holds a control character; write one key per line, or separate them with commas", c.previousKeysSource(), i+1)
		}
	}
	return nil
}

// keysConfig configures `tokend keys create` and `tokend keys revoke`.
type keysConfig struct {
	dbConfig
	Tenant string // --tenant; required
	Role   string // --role, create only: client or operator
	ID     string // --id, revoke only: the key's public id
}

// Validate reports what is wrong with c for the keys subcommand sub.
func (c keysConfig) Validate(sub string) error {
	if err := c.dbConfig.Validate(); err != nil {
		return err
	}
	if !apikey.ValidTenant(c.Tenant) {
		return fmt.Errorf("--tenant %q: want 1 to 64 of a-z 0-9 _ -, starting with a letter or digit", c.Tenant)
	}
	switch sub {
	case "create":
		if _, err := apikey.ParseRole(c.Role); err != nil {
			return fmt.Errorf("--role %q: want client or operator", c.Role)
		}
	case "revoke":
		if !strings.HasPrefix(c.ID, apikey.IDPrefix) {
			return fmt.Errorf("--id %q: want a key id, %s…", c.ID, apikey.IDPrefix)
		}
	}
	return nil
}

// envFlags maps flag names to the environment variables that set them when
// the flag is not on the command line.
type envFlags map[string]string

// parse parses args into fs, then gives each flag not on the command line the
// value of its environment variable, if set.
func (env envFlags) parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	for name, variable := range env {
		if v := getenv(variable); v != "" && !onCommandLine[name] {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s: %v", variable, err)
			}
		}
	}
	return nil
}
