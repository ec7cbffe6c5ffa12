package httpapi

import (
	"errors"
	"log/slog"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/token"
)

// noteRetiredKey counts and logs, at WARN, a request refused because its
// token derives from a retired server key: after a leak of the database and
// the server key, that is an attacker spending re-derived secrets, and an
// operator should see it. The line carries the request id and, for a spend,
// the token id and the retired key's id; never the secret. Other errors are
// ignored, so callers pass whatever they got.
func (s *Server) noteRetiredKey(c *gin.Context, a metrics.RetiredKeyAction, err error) {
	if !errors.Is(err, token.ErrKeyRetired) {
		return
	}
	s.metrics.ObserveRetiredKey(a)
	attrs := []slog.Attr{
		slog.String("request_id", c.GetString(requestIDKey)),
		slog.String("action", string(a)),
	}
	if k := Caller(c); k.ID != "" {
		attrs = append(attrs, slog.String("tenant", k.Tenant), slog.String("key_id", k.ID))
	}
	var retired *consume.KeyRetiredError
	if errors.As(err, &retired) {
		attrs = append(attrs, slog.String("token_id", retired.TokenID), slog.String("server_key_id", retired.KeyID))
	}
	s.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "refused a token derived under a retired server key", attrs...)
}
