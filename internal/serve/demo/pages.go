package demo

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/internal/serve/websession"
	"github.com/tokend/tokend/token"
)

var (
	//go:embed templates
	templateFiles embed.FS
	//go:embed static
	staticFiles embed.FS
	staticFS    = websession.Static(staticFiles, "static")
)

// pages renders the app's pages, the top-up form's among them (form.Pages).
type pages struct {
	app   *App
	pages map[string]*template.Template
}

func newPages(a *App) (*pages, error) {
	layout, err := template.ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("demo: templates: %w", err)
	}
	p := &pages{app: a, pages: map[string]*template.Template{}}
	for _, name := range []string{"signin.html", "topup.html", "result.html", "error.html"} {
		t, err := template.Must(layout.Clone()).ParseFS(templateFiles, "templates/"+name)
		if err != nil {
			return nil, fmt.Errorf("demo: templates: %w", err)
		}
		p.pages[name] = t
	}
	return p, nil
}

// page is what every page shows besides its own content.
type page struct {
	Base string // where the app is mounted
	User string // the signed-in user, "" for none
}

type signinData struct {
	Name    string
	Problem string
}

type topupData struct {
	Field   form.Field
	Account string // the visitor's own, the only one it may top up
	Amount  string // the value the input shows
	Balance int64  // Account's balance now
	Problem string // why the previous submit was refused
}

type resultData struct {
	TokenID  string
	Replayed bool
	Failed   bool
	Account  ledger.Account // the outcome when it succeeded
	Failure  ledger.Failure // the outcome when it failed for good
}

type errorData struct {
	Title, Message string
}

// render executes the page name with data, inside the layout, and writes it
// with status. It renders to a buffer first so that a template error becomes
// a 500, not half a page.
func (p *pages) render(w http.ResponseWriter, status int, name, user string, data any) {
	var b bytes.Buffer
	err := p.pages[name].ExecuteTemplate(&b, "layout", struct {
		page
		Data any
	}{page{Base: p.app.path, User: user}, data})
	if err != nil {
		p.app.log.Error("demo: render", "page", name, "err", err)
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes()) //nolint:errcheck // the browser went away
}

// Form renders the top-up form, fresh or after a refused submit.
func (p *pages) Form(w http.ResponseWriter, r *http.Request, status int, f form.Field, problem error) {
	user := userOf(r)
	d := topupData{Field: f, Account: user, Problem: problemText(problem)}
	if r.Method == http.MethodPost {
		// A refused submit did nothing; keep what was typed.
		d.Amount = r.PostForm.Get("amount")
	}
	balance, err := ledger.Balance(r.Context(), p.app.pool, p.app.tenant, user)
	if err != nil {
		p.Error(w, r, http.StatusInternalServerError, err)
		return
	}
	d.Balance = balance
	p.render(w, status, "topup.html", user, d)
}

// Result renders the outcome of a top-up from its stored body, the same for
// the first submit and for every replay.
func (p *pages) Result(w http.ResponseWriter, r *http.Request, res form.Result) {
	d := resultData{TokenID: res.TokenID, Replayed: res.Replayed, Failed: res.State == token.Failed}
	var err error
	if d.Failed {
		err = res.Decode(&d.Failure)
	} else {
		err = res.Decode(&d.Account)
	}
	if err != nil {
		p.Error(w, r, http.StatusInternalServerError, err)
		return
	}
	p.render(w, res.Status, "result.html", userOf(r), d)
}

// Error renders a page that offers no fresh form: the top-up may be running
// or done, and reloading shows its result.
func (p *pages) Error(w http.ResponseWriter, r *http.Request, status int, err error) {
	d := errorData{
		Title:   "Something went wrong",
		Message: "Something went wrong on our side. Reload this page in a moment: if the top-up went through, you will see its result, and it will not be done twice.",
	}
	switch {
	case errors.Is(err, token.ErrInProgress):
		d.Title, d.Message = "Still working", "This top-up is still being processed. Reload this page in a moment to see its result."
	case errors.Is(err, token.ErrOutcomeUnknown):
		d.Title, d.Message = "Outcome unknown", "We cannot tell yet whether this top-up went through. An operator will check; reload this page later to see its result."
	default:
		p.app.log.Error("demo: top-up", "status", status, "err", err)
	}
	p.render(w, status, "error.html", userOf(r), d)
}

// problemText words why a submit was refused.
func problemText(problem error) string {
	switch {
	case problem == nil:
		return ""
	case errors.Is(problem, token.ErrExpired):
		return "This form expired before it was sent, so nothing was done. Here is a fresh one."
	case errors.Is(problem, token.ErrRevoked):
		return "This form was cancelled by an operator, so nothing was done. Here is a fresh one."
	case errors.Is(problem, form.ErrStale):
		return "This form can no longer be sent, so nothing was done. Here is a fresh one."
	case errors.Is(problem, errAccount):
		return "The account is 1 to 64 letters, digits or . _ : @ - characters."
	case errors.Is(problem, errAmount):
		return "The amount is a whole number from 1 to " + strconv.FormatInt(ledger.MaxAmount, 10) + "."
	}
	return "These values were refused, so nothing was done. Check them and send the form again."
}
