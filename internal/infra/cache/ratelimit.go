package cache

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// ErrNoSharedLimit: the rate cannot be checked in Redis right now (no
// Redis, or the breaker is open); the caller limits in process instead.
var ErrNoSharedLimit = errors.New("cache: no shared rate limit")

// Allow takes one request from key's bucket, which every instance sharing
// the Redis draws from: perSecond sustained, burst at once (GCRA, by
// redis_rate). When it is refused, retryAfter says when one will be
// allowed. Without Redis it answers ErrNoSharedLimit.
func (c *Cache) Allow(ctx context.Context, key string, perSecond float64, burst int) (allowed bool, retryAfter time.Duration, err error) {
	if c.rdb == nil || !c.breaker.allow() {
		return false, 0, ErrNoSharedLimit
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	res, err := redis_rate.NewLimiter(c.rdb).Allow(ctx, c.cfg.Prefix+"rl:"+key, rateLimit(perSecond, burst))
	if err != nil {
		c.failure()
		return false, 0, errors.Join(ErrNoSharedLimit, err)
	}
	c.breaker.success()
	return res.Allowed > 0, max(res.RetryAfter, 0), nil
}

// rateLimit expresses perSecond as whole requests per period, which is
// what redis_rate counts in.
func rateLimit(perSecond float64, burst int) redis_rate.Limit {
	n := max(1, int(math.Ceil(perSecond)))
	return redis_rate.Limit{Rate: n, Burst: max(burst, 1), Period: time.Duration(float64(n) / perSecond * float64(time.Second))}
}
