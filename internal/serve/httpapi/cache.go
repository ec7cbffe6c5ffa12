package httpapi

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/metrics"
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

// lookupToken reads a token through the cache. A nil cache goes straight to
// Postgres. The cache answers only for tokens in a terminal state, which no
// change leaves (internal/infra/cache's settled); any other token, an issued one
// near its expiry included, is read from Postgres, whose clock decides.
func (s *Server) lookupToken(ctx context.Context, tenant, id string) (token.Record, error) {
	return s.cache.GetOrLoad(ctx, tenant, id, func(ctx context.Context) (token.Record, error) {
		return inspect.Get(ctx, s.pool, tenant, id)
	})
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
