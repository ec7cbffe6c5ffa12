package console

import (
	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/websession"
)

// secureHeaders keeps the console's pages out of frames and caches, and lets
// them load nothing but their own stylesheet.
var secureHeaders = []gin.HandlerFunc{
	websession.SecureHeaders("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
	func(c *gin.Context) { c.Header("Cache-Control", "no-store") },
	websession.SameOriginPosts("Refused: this request did not come from the console."),
}
