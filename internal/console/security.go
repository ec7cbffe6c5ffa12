package console

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/websession"
)

// secureHeaders keeps the console's pages out of frames and caches, and lets
// them load nothing but their own stylesheet.
func secureHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// sameOrigin refuses a POST that does not come from a page of this origin.
// Browsers send Origin with every POST; Referer is the fallback for the few
// that do not. A POST that names neither is refused.
func sameOrigin(c *gin.Context) {
	if c.Request.Method != http.MethodPost {
		return
	}
	if !websession.SameOrigin(c.Request) {
		c.String(http.StatusForbidden, "Refused: this request did not come from the console.")
		c.Abort()
	}
}
