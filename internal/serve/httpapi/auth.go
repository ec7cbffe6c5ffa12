package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/infra/apikey"
)

var errForbidden = &Problem{Status: http.StatusForbidden, Code: "forbidden", Detail: "this API key's role may not use this route"}

// authenticated admits requests bearing a valid API key whose role includes need.
func (s *Server) authenticated(need apikey.Role) gin.HandlerFunc {
	return func(c *gin.Context) {
		presented, ok := bearer(c.GetHeader("Authorization"))
		if !ok {
			Abort(c, apikey.ErrUnauthorized)
			return
		}
		k, err := s.authenticate(c.Request.Context(), presented)
		if err != nil {
			Abort(c, err)
			return
		}
		c.Set(callerKey, k)
		if s.limiter != nil {
			if ok, wait := s.allow(c.Request.Context(), k.ID); !ok {
				Abort(c, rateLimited(wait))
				return
			}
		}
		if !k.Role.Includes(need) {
			Abort(c, errForbidden)
			return
		}
		c.Next()
	}
}

// Caller returns the API key c was authenticated with, or the zero Key on a
// route without authentication. The tenant to act for is Caller(c).Tenant.
func Caller(c *gin.Context) apikey.Key {
	k, _ := c.Get(callerKey)
	key, _ := k.(apikey.Key)
	return key
}

// bearer extracts the credential of an "Authorization: Bearer <key>" header.
func bearer(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return "", false
	}
	return cred, true
}
