// Command tokend runs the one-time token service and manages its database
// and API keys.
//
// Usage:
//
//	tokend serve                                       serve the API
//	tokend migrate                                     apply the schema migrations
//	tokend keys create --tenant T --role client|operator   print a new API key
//	tokend keys revoke --tenant T --id key_…           revoke an API key
//	tokend health                                      exit 0 when /readyz answers 200
//
// Configuration comes from the environment, every variable of which the
// usage text (tokend help) lists; flags override it.
// Exit status: 0 on success, 1 on failure, 2 for a usage or configuration
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  tokend serve [--listen ADDR] [--database-url URL] [--redis-url URL] [--rate-limit N]
               [--shutdown-timeout D] [--sweep-interval D] [--debug-listen ADDR] [--demo]
  tokend migrate [--database-url URL]
  tokend keys create --tenant T --role client|operator [--database-url URL]
  tokend keys revoke --tenant T --id key_… [--database-url URL]
  tokend health [--ready] [--listen ADDR] [--timeout D]
  tokend version

environment (a flag overrides its variable):
  TOKEND_DATABASE_URL          Postgres URL (required)
  TOKEND_DATABASE_POOLING      session, or transaction behind a transaction-pooling proxy (default session)
  TOKEND_DATABASE_SESSION_URL  Postgres URL with sessions of their own, for migrations and LISTEN (default the above)
  TOKEND_MIGRATION_LOCK_TIMEOUT how long migrating waits in all for locks, each DDL's wait cut at 2s and retried (default 1m)
  TOKEND_ALLOW_SUPERUSER       serve: 1 lets serve connect as a Postgres superuser, which it refuses otherwise (default off)
  TOKEND_SECRET_KEY            serve: at least 32 bytes of random text, token secrets derive from it (required)
  TOKEND_SECRET_KEY_FILE       serve: a file holding TOKEND_SECRET_KEY instead (see secrets from files below)
  TOKEND_PREVIOUS_SECRET_KEYS  serve: comma-separated former secret keys, after a rotation
  TOKEND_LISTEN                serve: listen address (default 127.0.0.1:8080)
  TOKEND_REDIS_URL             serve, keys revoke: Redis of the lookup cache (optional)
  TOKEND_RATE_LIMIT            serve: requests per second per API key, 0 for none (default 1000)
  TOKEND_SWEEP_INTERVAL        serve: how often the sweeper runs (default 1m)
  TOKEND_EVENT_RETENTION       serve: how long events outlive their purged token (default 168h)
  TOKEND_WEBHOOK_TIMEOUT       serve: how long one webhook delivery may take (default 10s)
  TOKEND_WEBHOOK_MAX_AGE       serve: how long a webhook delivery is retried (default 24h)
  TOKEND_WEBHOOK_DISABLE_AFTER serve: disable an endpoint failing this long (default 72h)
  TOKEND_WEBHOOK_ALLOWED_HOSTS serve: comma-separated hosts, IPs and CIDRs webhooks may go to, even private (default any public address)
  TOKEND_WEBHOOK_PROXY         serve: http://host:port egress proxy for webhooks, or env for HTTPS_PROXY/HTTP_PROXY/NO_PROXY (default direct)
  TOKEND_WEBHOOK_MAX_ENDPOINTS serve: webhook endpoints a tenant may register (default 32)
  TOKEND_WEBHOOK_SECRET_OVERLAP serve: a rotated-out webhook secret signs beside the new one (default 24h)
  TOKEND_WEBHOOK_ENDPOINT_CONCURRENCY serve: deliveries in flight per endpoint, all instances (default 4)
  TOKEND_WEBHOOK_TENANT_CONCURRENCY serve: deliveries in flight per tenant, all instances (default 16)
  TOKEND_SHUTDOWN_TIMEOUT      serve: how long in-flight requests may finish after SIGTERM (default 15s)
  TOKEND_DEBUG_LISTEN          serve: address of Go's profiler, /debug/pprof/; keep it on loopback (default off)
  TOKEND_DEMO                  serve: 1 serves the demo app under /demo, where anyone may sign in (default off)

secrets from files: TOKEND_SECRET_KEY, TOKEND_PREVIOUS_SECRET_KEYS, TOKEND_DATABASE_URL,
TOKEND_DATABASE_SESSION_URL and TOKEND_REDIS_URL may each be read from a file instead:
  NAME_FILE                    the file's path, e.g. /run/secrets/tokend_key
  $CREDENTIALS_DIRECTORY/NAME  a systemd credential called NAME (LoadCredential=NAME:/path)
a trailing line break is dropped; NAME and NAME_FILE both set is an error.

traces (OpenTelemetry, off by default): OTEL_TRACES_EXPORTER=otlp or an
OTEL_EXPORTER_OTLP_ENDPOINT turns them on, OTEL_SDK_DISABLED=true off; the other
standard OTEL_* variables apply (docs/tracing.md).
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// usageError is a mistake in the command line or the environment.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run runs the command line args and returns the exit status. Only a
// command's result goes to stdout; everything else goes to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := runCommand(ctx, args, getenv, stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "tokend: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "tokend: %v\n", err)
		return 1
	}
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("no command given")}
	}
	switch args[0] {
	case "serve", "migrate", "keys":
		var err error
		if getenv, err = secretsFromFiles(getenv); err != nil {
			return usageError{err}
		}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		return serve(ctx, rest, getenv, stderr)
	case "migrate":
		return migrate(ctx, rest, getenv, stderr)
	case "keys":
		if len(rest) == 0 {
			return usageError{errors.New("keys: want create or revoke")}
		}
		switch rest[0] {
		case "create":
			return createKey(ctx, rest[1:], getenv, stdout, stderr)
		case "revoke":
			return revokeKey(ctx, rest[1:], getenv, stderr)
		}
		return usageError{fmt.Errorf("keys %s: want create or revoke", rest[0])}
	case "health":
		return health(ctx, rest, getenv, stderr)
	case "version", "--version":
		return printVersion(stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stderr, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", cmd)}
	}
}

// parseFlags parses a subcommand's command line, taking unset flags from the
// environment. Its errors are usage errors.
func parseFlags(name string, args []string, getenv func(string) string, stderr io.Writer, bind func(*flag.FlagSet, envFlags)) error {
	fs := flag.NewFlagSet("tokend "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := envFlags{}
	bind(fs, env)
	if err := env.parse(fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}
