package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/apikey"
	"github.com/tokend/tokend/internal/clock"
	"github.com/tokend/tokend/internal/metrics"
	"github.com/tokend/tokend/token"
)

// requestIDCtxKey carries the request id in the request's context, for
// code below the handlers that logs (the cache's warnings about forged
// entries).
type requestIDCtxKey struct{}

func withRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDCtxKey{}, id)
}

// RequestID returns the id of the request ctx belongs to (see
// RequestIDHeader), or "" outside a request. It suits cache.Config.RequestID.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDCtxKey{}).(string)
	return id
}

// expiryMargin is how close to its expiry, by this process's clock, a cached
// issued token is no longer trusted. Expiry is the database clock's verdict
// (inspect.StateExpr), which a cached record cannot carry; the margin covers
// this process's clock being behind the database's, as internal/cache's
// in-process layer allows for the purge.
const expiryMargin = time.Minute

// lookupToken reads a token through the cache. A nil cache goes straight to
// Postgres.
//
// A record read from Postgres is as of the database's now(). One from the
// cache is as of when it was loaded: an issued token in it may have expired
// since. So a cached issued token that is near or past its expiry is read
// again from Postgres, whose clock decides, and the cache entry replaced
// when the token turned out expired.
func (s *Server) lookupToken(ctx context.Context, tenant, id string) (token.Record, error) {
	var loaded atomic.Bool // set when this call read Postgres itself
	rec, err := s.cache.GetOrLoad(ctx, tenant, id, func(ctx context.Context) (token.Record, error) {
		loaded.Store(true)
		return inspect.Get(ctx, s.pool, tenant, id)
	})
	if err != nil || loaded.Load() || rec.State != token.Issued || clock.Now().Add(expiryMargin).Before(rec.ExpiresAt) {
		return rec, err
	}
	fresh, err := inspect.Get(ctx, s.pool, tenant, id)
	if err != nil {
		return fresh, err
	}
	if fresh.State != rec.State || fresh.Generation != rec.Generation {
		s.forgetRecord(ctx, fresh)
	}
	return fresh, nil
}

// resolveCached resolves an API key through the cache, keyed by its hash so
// the key itself never reaches Redis.
func (s *Server) resolveCached(ctx context.Context, presented string) (apikey.Key, error) {
	h := sha256.Sum256([]byte(presented))
	return s.cache.GetOrLoadKey(ctx, h[:], func(ctx context.Context) (apikey.Key, error) {
		return apikey.Resolve(ctx, s.pool, presented)
	})
}

// forget drops what the cache holds about the token a committed change
// touched; the state and generation version the tombstone, so a reader that
// loaded the old row cannot put it back.
func (s *Server) forget(ctx context.Context, tenant string, resp consume.Response) {
	if resp.TokenID == "" || resp.Replayed {
		return
	}
	s.cache.Invalidate(context.WithoutCancel(ctx), tenant, resp.TokenID, resp.State, resp.Generation)
}

// forgetRecord is forget for a change an operator made.
func (s *Server) forgetRecord(ctx context.Context, r token.Record) {
	s.cache.Invalidate(context.WithoutCancel(ctx), r.Tenant, r.ID, r.State, r.Generation)
}

// spendOutcome classifies a spend for the metrics.
func spendOutcome(resp consume.Response, err error) metrics.SpendOutcome {
	switch {
	case errors.Is(err, token.ErrInProgress):
		return metrics.SpendInProgress
	case err != nil:
		return metrics.SpendRejected
	case resp.Replayed:
		return metrics.SpendReplayed
	case resp.State == token.Failed:
		return metrics.SpendFailed
	}
	return metrics.SpendExecuted
}

// metricsRoute serves the Prometheus scrape.
func (s *Server) metricsRoute(c *gin.Context) { s.metrics.Handler().ServeHTTP(c.Writer, c.Request) }
