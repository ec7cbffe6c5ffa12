package demo

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/websession"
)

// secureHeaders keeps the pages from being framed or from loading anything
// but their own stylesheet and script.
func secureHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// sameOrigin refuses a POST sent by a page of another site. The form token
// makes a top-up happen at most once; it does not tell who asked for it.
func sameOrigin(c *gin.Context) {
	if c.Request.Method != http.MethodPost {
		return
	}
	if !websession.SameOrigin(c.Request) {
		c.String(http.StatusForbidden, "This form was sent from another site.")
		c.Abort()
	}
}
