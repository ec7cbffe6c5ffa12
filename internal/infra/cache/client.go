package cache

import (
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// parseURL parses rawURL (see Config.URL) and returns what builds its
// client, so that Validate can check a URL without opening anything.
func parseURL(rawURL string, timeout time.Duration) (func() redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("cache: Redis URL: %w", redactErr(err))
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("cache: Redis URL: %w", redactErr(err))
		}
		shorten(timeout, knobs{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries})
		return func() redis.UniversalClient { return redis.NewFailoverClient(o) }, nil
	case q.Has("addr"):
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("cache: Redis URL: %w", redactErr(err))
		}
		shorten(timeout, knobs{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries})
		return func() redis.UniversalClient { return redis.NewClusterClient(o) }, nil
	default:
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("cache: Redis URL: %w", redactErr(err))
		}
		shorten(timeout, knobs{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries})
		return func() redis.UniversalClient { return redis.NewClient(o) }, nil
	}
}

// knobs points at the fields shorten sets, which the option types of the
// three kinds of client all have.
type knobs struct {
	dial, read, write, pool *time.Duration
	retries, dialRetries    *int
}

// shorten sets the timeouts the URL left unset to timeout, and the retries
// it did not ask for to none. go-redis's defaults (seconds, three retries of
// a command, five attempts at each dial, 100ms apart) suit a store; for a
// cache that Postgres can always stand in for, a slow answer is worth less
// than none, and the breaker, not a retry, deals with a Redis that fails.
func shorten(timeout time.Duration, k knobs) {
	for _, d := range []*time.Duration{k.dial, k.read, k.write, k.pool} {
		if *d == 0 {
			*d = timeout
		}
	}
	if *k.retries == 0 {
		*k.retries = -1 // go-redis: -1 disables retries, 0 means its default
	}
	if *k.dialRetries == 0 {
		*k.dialRetries = 1 // the number of attempts, retries or not
	}
}

// redactErr keeps a password in the URL out of an error: url.Parse quotes
// the whole URL in its errors.
func redactErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
