package demo

import (
	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/websession"
)

// secureHeaders keeps the pages from being framed or from loading anything
// but their own stylesheet and script. A POST sent by a page of another
// site is refused: the form token makes a top-up happen at most once, it
// does not tell who asked for it.
var secureHeaders = []gin.HandlerFunc{
	websession.SecureHeaders("default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
	websession.SameOriginPosts("This form was sent from another site."),
}
