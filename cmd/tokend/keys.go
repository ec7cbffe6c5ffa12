package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
)

func createKey(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg keysConfig
	err := parseFlags("keys create", args, getenv, stderr, func(fs *flag.FlagSet, env envFlags) {
		cfg.bind(fs, env)
		fs.StringVar(&cfg.Tenant, "tenant", "", "tenant the key belongs to")
		fs.StringVar(&cfg.Role, "role", "", "client or operator")
	})
	if err != nil {
		return err
	}
	if err := cfg.Validate("create"); err != nil {
		return usageError{err}
	}
	conn, err := cfg.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	k, secret, err := apikey.Create(ctx, conn, cfg.Tenant, apikey.Role(cfg.Role))
	if err != nil {
		return err
	}
	// The key alone on stdout, so that `key=$(tokend keys create ...)` works.
	if _, err := fmt.Fprintln(stdout, secret); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tokend: created %s key %s for tenant %s; it is shown once, store it now\n", k.Role, k.ID, k.Tenant)
	return nil
}

func revokeKey(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg keysConfig
	err := parseFlags("keys revoke", args, getenv, stderr, func(fs *flag.FlagSet, env envFlags) {
		cfg.bind(fs, env)
		fs.StringVar(&cfg.Tenant, "tenant", "", "tenant the key belongs to")
		fs.StringVar(&cfg.ID, "id", "", "the key's id, key_…")
	})
	if err != nil {
		return err
	}
	if err := cfg.Validate("revoke"); err != nil {
		return usageError{err}
	}
	conn, err := cfg.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	keyHash, err := apikey.Revoke(ctx, conn, cfg.Tenant, cfg.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tokend: revoked key %s of tenant %s\n", cfg.ID, cfg.Tenant)
	forgetCachedKey(ctx, getenv("TOKEND_REDIS_URL"), getenv("TOKEND_SECRET_KEY"), keyHash, stderr)
	return nil
}

// forgetCachedKey drops a revoked key from the lookup cache. Running servers
// hear of the revocation from Postgres and drop the key from Redis and from
// their memory themselves (apikey.Watch); this covers the time none is
// listening. The tombstone is authenticated like every entry, so it needs
// the servers' TOKEND_SECRET_KEY; without it, nothing is written.
func forgetCachedKey(ctx context.Context, redisURL, serverKey string, keyHash []byte, stderr io.Writer) {
	if redisURL == "" {
		return
	}
	if serverKey == "" {
		fmt.Fprintf(stderr, "tokend: TOKEND_SECRET_KEY is unset, so the cache cannot be told; servers not listening for revocations may accept the key until their cached resolution expires (%s)\n", cache.DefaultKeyTTL)
		return
	}
	c, err := cache.New(cache.Config{URL: redisURL, MACKey: cache.MACKey([]byte(serverKey))})
	if err != nil {
		fmt.Fprintf(stderr, "tokend: TOKEND_REDIS_URL: %v; servers not listening for revocations may accept the key until their cached resolution expires (%s)\n", err, cache.DefaultKeyTTL)
		return
	}
	defer c.Close()
	// Errors are the cache's to count: a missed invalidation is bounded by the TTL.
	c.InvalidateKey(ctx, keyHash)
}
