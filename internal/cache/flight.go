package cache

import (
	"context"
	"errors"

	"golang.org/x/sync/singleflight"
)

// shared runs fn once for all concurrent callers with the same key, so that
// a stampede on one entry makes one Redis lookup and at most one load.
//
// fn runs under the context of the caller that started it. When that
// context ends mid-load, the callers that joined get its context error
// although theirs are live; each of them then runs fn again on its own.
func shared[T any](ctx context.Context, g *singleflight.Group, key string, fn func(context.Context) (T, error)) (T, error) {
	v, err, joined := g.Do(key, func() (any, error) { return fn(ctx) })
	if err != nil && joined && ctx.Err() == nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fn(ctx)
	}
	t, _ := v.(T) // v is nil only if fn called runtime.Goexit
	return t, err
}
