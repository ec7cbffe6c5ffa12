package main

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisTimeout bounds each of redisDBSize and redisFlushDB: dialing,
// AUTH/SELECT and the command together.
const redisTimeout = 5 * time.Second

// redisDBSize returns the number of keys in the database a redis:// URL
// names. It tells whether tokend wrote to its cache.
func redisDBSize(ctx context.Context, rawURL string) (int64, error) {
	var n int64
	err := withRedis(ctx, rawURL, func(ctx context.Context, c *redis.Client) (err error) {
		n, err = c.DBSize(ctx).Result()
		return err
	})
	return n, err
}

// redisFlushDB empties the database a redis:// URL names, and only that one.
func redisFlushDB(ctx context.Context, rawURL string) error {
	return withRedis(ctx, rawURL, func(ctx context.Context, c *redis.Client) error {
		return c.FlushDB(ctx).Err()
	})
}

// withRedis runs f on a one-connection client for the database rawURL
// (redis:// or rediss://, as go-redis's ParseURL reads it) names, with no
// retries: tokend-load asks once and reports what it got.
func withRedis(ctx context.Context, rawURL string, f func(context.Context, *redis.Client) error) error {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		// A *url.Error quotes the URL, password included.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return err
	}
	o.PoolSize = 1
	o.MaxRetries = -1
	o.DialerRetries = 1
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	return f(ctx, c)
}
