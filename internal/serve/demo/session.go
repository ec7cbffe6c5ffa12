package demo

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/websession"
)

const (
	cookieName = "tokend_demo"
	sessionTTL = 12 * time.Hour
)

// nameRE is what a demo user may be called: a ledger account name, so that
// the user's own account can be named after them.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)

// session is the signed content of the session cookie.
type session struct {
	User    string `json:"u"`
	Expires int64  `json:"e"` // Unix seconds
}

type userKey struct{}

// userOf returns the signed-in user of r, set by requireUser.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

// currentUser returns the user of r's session cookie, "" for none.
func (a *App) currentUser(r *http.Request) string {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return ""
	}
	var s session
	if !a.sessions.Verify(c.Value, &s) || time.Now().Unix() >= s.Expires || !nameRE.MatchString(s.User) {
		return ""
	}
	return s.User
}

// requireUser sends visitors who are not signed in to the sign-in page, and
// puts the signed-in user in the request's context for the pages.
func (a *App) requireUser(c *gin.Context) {
	u := a.currentUser(c.Request)
	if u == "" {
		c.Redirect(http.StatusSeeOther, a.path+"/signin")
		c.Abort()
		return
	}
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), userKey{}, u))
}

func (a *App) home(c *gin.Context) {
	if a.currentUser(c.Request) == "" {
		c.Redirect(http.StatusSeeOther, a.path+"/signin")
		return
	}
	c.Redirect(http.StatusSeeOther, a.path+"/topup")
}

func (a *App) signinPage(c *gin.Context) {
	user := a.currentUser(c.Request)
	a.pages.render(c.Writer, http.StatusOK, "signin.html", user, signinData{Name: user})
}

func (a *App) signin(c *gin.Context) {
	name := strings.TrimSpace(c.PostForm("name"))
	if !nameRE.MatchString(name) {
		a.pages.render(c.Writer, http.StatusUnprocessableEntity, "signin.html", "", signinData{
			Name: name, Problem: "A name is 1 to 32 letters, digits, dots, dashes or underscores.",
		})
		return
	}
	v, err := a.sessions.Sign(session{User: name, Expires: time.Now().Add(sessionTTL).Unix()})
	if err != nil {
		a.pages.Error(c.Writer, c.Request, http.StatusInternalServerError, err)
		return
	}
	a.setCookie(c, v, int(sessionTTL/time.Second))
	c.Redirect(http.StatusSeeOther, a.path+"/topup")
}

func (a *App) signout(c *gin.Context) {
	a.setCookie(c, "", -1)
	c.Redirect(http.StatusSeeOther, a.path+"/signin")
}

func (a *App) setCookie(c *gin.Context, value string, maxAge int) {
	websession.SetCookie(c.Writer, c.Request, http.Cookie{Name: cookieName, Value: value, Path: a.path, SameSite: http.SameSiteLaxMode}, maxAge)
}
