package websession

import (
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

// SetCookie sets (maxAge > 0) or clears (maxAge < 0) a session cookie
// scripts cannot read, Secure whenever the browser came over HTTPS.
func SetCookie(w http.ResponseWriter, r *http.Request, c http.Cookie, maxAge int) {
	c.MaxAge, c.HttpOnly, c.Secure = maxAge, true, IsHTTPS(r)
	http.SetCookie(w, &c)
}

// IsHTTPS reports whether the browser reached us over HTTPS, directly or
// through a proxy that terminates TLS; only then can a cookie be Secure.
func IsHTTPS(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// SecureHeaders returns a middleware that keeps pages out of frames and off
// other sites' referrers, with csp as their Content-Security-Policy.
func SecureHeaders(csp string) gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
	}
}

// SameOriginPosts returns a middleware that answers 403 with refusal to a
// POST that SameOrigin refuses.
func SameOriginPosts(refusal string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Method == http.MethodPost && !SameOrigin(c.Request) {
			c.String(http.StatusForbidden, refusal)
			c.Abort()
		}
	}
}

// Static serves dir of files, an embedded tree.
func Static(files fs.FS, dir string) http.FileSystem {
	sub, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // dir is a constant that go:embed has checked
	}
	return http.FS(sub)
}
