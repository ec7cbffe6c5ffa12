package form

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/token"
)

// Pages renders the pages of a form served by Handler or GinHandler. Each
// method writes the whole response, with the status it is given.
type Pages interface {
	// Form writes the form page with f inside its <form>. problem is nil on a
	// first rendering; after a refused submit it says why (it matches
	// ErrStale or ErrInvalid, and the cause), to be shown above the fresh
	// form, which a POST's r.PostForm can fill in again.
	Form(w http.ResponseWriter, r *http.Request, status int, f Field, problem error)
	// Result writes the outcome of a submit, the first or a replay, with
	// res.Status.
	Result(w http.ResponseWriter, r *http.Request, res Result)
	// Error writes a page for a request that can be neither carried out nor
	// refused yet: another submit of the form is running, its outcome is
	// unknown, tokend failed, or there is no signed-in user. It must not
	// offer a fresh form, which could run the effect a second time.
	Error(w http.ResponseWriter, r *http.Request, status int, err error)
}

// Handler serves the form. GET renders it: a request that names no
// rendering in its RenderParam is redirected to a new one. POST spends the
// token and renders the outcome, or a fresh form when the submit was refused.
// subject returns the signed-in user of r, "" for none.
//
// Register it for GET at the page's URL and for POST at another URL, the
// form's action; see the package documentation for why.
func (p *Protector) Handler(pages Pages, subject func(r *http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.serve(w, r, subject(r), pages)
	})
}

// GinHandler is Handler for gin, where the signed-in user is found in the
// gin context. Register it like Handler:
//
//	h := p.GinHandler(pages, user)
//	r.GET("/topup", h)
//	r.POST("/topup/send", h)
func (p *Protector) GinHandler(pages Pages, subject func(c *gin.Context) string) gin.HandlerFunc {
	return func(c *gin.Context) {
		p.serve(c.Writer, c.Request, subject(c), pages)
	}
}

func (p *Protector) serve(w http.ResponseWriter, r *http.Request, subject string, pages Pages) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if _, ok := renderOf(r); !ok {
			// Give the rendering a URL of its own before rendering it.
			http.Redirect(w, r, withNewRender(r), http.StatusSeeOther)
			return
		}
		p.render(w, r, subject, pages, http.StatusOK, nil)
	case http.MethodPost:
		res, err := p.Spend(r, subject)
		switch {
		case err == nil:
			pages.Result(w, r, res)
		case errors.Is(err, ErrStale), errors.Is(err, ErrInvalid):
			p.render(w, r, subject, pages, statusFor(err), err)
		default:
			var busy *consume.InProgressError
			if errors.As(err, &busy) {
				w.Header().Set("Retry-After", strconv.Itoa(busy.RetryAfterSeconds))
			}
			pages.Error(w, r, statusFor(err), err)
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	}
}

// render writes the form with a token of a new rendering.
func (p *Protector) render(w http.ResponseWriter, r *http.Request, subject string, pages Pages, status int, problem error) {
	f, err := p.Issue(r, subject)
	if errors.Is(err, token.ErrKeyRetired) && r.Method != http.MethodPost {
		// The rendering's token derives from a retired server key and can
		// no longer be shown: the page starts over as a new rendering.
		http.Redirect(w, r, withNewRender(r), http.StatusSeeOther)
		return
	}
	if err != nil {
		pages.Error(w, r, statusFor(err), err)
		return
	}
	// Private: the page holds a secret. Not no-store: Back should restore
	// this page as it was left.
	w.Header().Set("Cache-Control", "private, no-cache")
	pages.Form(w, r, status, f, problem)
}

// statusFor is the HTTP status of a refused or failed request.
func statusFor(err error) int {
	switch {
	case errors.Is(err, ErrNoSubject):
		return http.StatusUnauthorized
	case errors.Is(err, ErrStale), errors.Is(err, token.ErrInProgress), errors.Is(err, token.ErrOutcomeUnknown):
		return http.StatusConflict
	case errors.Is(err, ErrInvalid):
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}
