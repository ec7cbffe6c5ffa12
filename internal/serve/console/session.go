package console

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/websession"
)

const (
	cookieName = "tokend_console"
	csrfField  = "csrf"
	sessionKey = "console.session"
)

// session is the signed content of the session cookie. It names the key the
// operator signed in with; the key itself is never kept.
type session struct {
	// ID names the session in console_signouts once signed out.
	ID      string `json:"i"`
	KeyID   string `json:"k"`
	Tenant  string `json:"t"`
	CSRF    string `json:"c"` // sent back in every form of the console
	Expires int64  `json:"e"` // Unix seconds
}

// current returns the session of r, if it has a valid one.
func (c *Console) current(r *http.Request) (session, bool) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	var s session
	ok := c.sessions.Verify(ck.Value, &s) && time.Now().Unix() < s.Expires && s.Tenant != "" && s.CSRF != "" && s.ID != ""
	return s, ok
}

// sessionOf returns the session requireOperator found.
func sessionOf(c *gin.Context) session {
	s, _ := c.Get(sessionKey)
	return s.(session)
}

// requireOperator sends visitors who are not signed in to the sign-in page,
// and so those whose session names a key revoked since: their cookie is
// cleared.
func (c *Console) requireOperator(g *gin.Context) {
	s, ok := c.current(g.Request)
	if !ok {
		g.Redirect(http.StatusSeeOther, c.path+"/signin")
		g.Abort()
		return
	}
	if c.allow != nil {
		if ok, wait := c.allow(g.Request.Context(), s.KeyID); !ok {
			g.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
			c.problem(g, http.StatusTooManyRequests, "Too many requests from this API key, here and on the API together. Wait a moment and reload the page.")
			g.Abort()
			return
		}
	}
	ended, err := websession.NewSignOuts(c.pool).Ended(g.Request.Context(), s.Tenant, s.ID)
	if err == nil && ended {
		err = apikey.ErrUnauthorized // signed out, on any instance: a copy of the cookie is refused too
	}
	if err == nil {
		err = c.live(g.Request.Context(), s.Tenant, s.KeyID)
	}
	switch {
	case errors.Is(err, apikey.ErrUnauthorized):
		c.setCookie(g, "", -1)
		g.Redirect(http.StatusSeeOther, c.path+"/signin")
		g.Abort()
		return
	case err != nil:
		c.fail(g, err)
		g.Abort()
		return
	}
	g.Set(sessionKey, s)
}

// checkCSRF refuses a POST that does not carry the session's CSRF token.
func (c *Console) checkCSRF(g *gin.Context) {
	want := sessionOf(g).CSRF
	if !hmac.Equal([]byte(g.PostForm(csrfField)), []byte(want)) {
		g.String(http.StatusForbidden, "Refused: this form is not from your console session. Reload the page and try again.")
		g.Abort()
	}
}

func (c *Console) home(g *gin.Context) {
	if _, ok := c.current(g.Request); !ok {
		g.Redirect(http.StatusSeeOther, c.path+"/signin")
		return
	}
	g.Redirect(http.StatusSeeOther, c.path+"/tokens")
}

type signinData struct {
	Problem string
}

func (c *Console) signinPage(g *gin.Context) {
	c.pages.render(g.Writer, http.StatusOK, "signin.html", nil, signinData{})
}

func (c *Console) signin(g *gin.Context) {
	// Counted per client address before the key is looked at: a guesser
	// over the limit learns nothing and costs no lookup. The address is
	// the connection's; X-Forwarded-For is whatever a client likes.
	if ok, wait := c.signins.Allow(clientAddr(g.Request), c.now()); !ok {
		secs := max(1, int(math.Ceil(wait.Seconds())))
		g.Header("Retry-After", strconv.Itoa(secs))
		c.pages.render(g.Writer, http.StatusTooManyRequests, "signin.html", nil, signinData{
			Problem: fmt.Sprintf("Too many sign-in attempts from your address. Wait %d seconds, then try again.", secs)})
		return
	}
	k, err := c.resolve(g.Request.Context(), strings.TrimSpace(g.PostForm("key")))
	switch {
	case errors.Is(err, apikey.ErrUnauthorized):
		c.pages.render(g.Writer, http.StatusUnauthorized, "signin.html", nil, signinData{Problem: "This key is unknown or revoked."})
		return
	case err != nil:
		c.fail(g, err)
		return
	case !k.Role.Includes(apikey.Operator):
		c.pages.render(g.Writer, http.StatusForbidden, "signin.html", nil, signinData{Problem: "This is a client key. The console needs an operator key."})
		return
	}
	var csrf, id [32]byte
	_, _ = rand.Read(csrf[:]) // never fails, see crypto/rand.Read
	_, _ = rand.Read(id[:])
	v, err := c.sessions.Sign(session{
		ID:    base64.RawURLEncoding.EncodeToString(id[:]),
		KeyID: k.ID, Tenant: k.Tenant,
		CSRF:    base64.RawURLEncoding.EncodeToString(csrf[:]),
		Expires: time.Now().Add(c.sessionTTL).Unix(),
	})
	if err != nil {
		c.fail(g, err)
		return
	}
	c.setCookie(g, v, int(c.sessionTTL/time.Second))
	g.Redirect(http.StatusSeeOther, c.path+"/tokens")
}

// clientAddr is the address the request's connection comes from.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// signout ends the session for every instance (console_signouts), then
// clears the cookie: a copy of it taken before is refused from now on.
func (c *Console) signout(g *gin.Context) {
	s := sessionOf(g)
	if err := websession.NewSignOuts(c.pool).End(g.Request.Context(), s.Tenant, s.ID, time.Unix(s.Expires, 0)); err != nil {
		c.fail(g, err)
		return
	}
	c.setCookie(g, "", -1)
	g.Redirect(http.StatusSeeOther, c.path+"/signin")
}

func (c *Console) setCookie(g *gin.Context, value string, maxAge int) {
	websession.SetCookie(g.Writer, g.Request, http.Cookie{Name: cookieName, Value: value, Path: c.path, SameSite: http.SameSiteStrictMode}, maxAge)
}
