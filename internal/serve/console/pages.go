package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"time"

	"github.com/tokend/tokend/internal/serve/websession"
)

var (
	//go:embed templates
	templateFiles embed.FS
	//go:embed static
	staticFiles embed.FS
	staticFS    = websession.Static(staticFiles, "static")
)

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
}

// pages renders the console's pages inside its layout.
type pages struct {
	base  string
	log   *slog.Logger
	pages map[string]*template.Template
}

func newPages(base string, log *slog.Logger) (*pages, error) {
	layout, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	p := &pages{base: base, log: log, pages: map[string]*template.Template{}}
	for _, name := range []string{"index.html", "signin.html", "tokens.html", "token.html", "revoke.html", "reconcile.html", "problem.html", "webhooks.html", "webhook.html", "rotated.html"} {
		t, err := template.Must(layout.Clone()).ParseFS(templateFiles, "templates/"+name)
		if err != nil {
			return nil, fmt.Errorf("console: templates: %w", err)
		}
		p.pages[name] = t
	}
	return p, nil
}

// render executes the page name with data inside the layout and writes it
// with status. s is the operator's session, nil or empty when signed out. It
// renders to a buffer first so that a template error becomes a 500, not half
// a page.
func (p *pages) render(w http.ResponseWriter, status int, name string, s *session, data any) {
	var b bytes.Buffer
	v := struct {
		Base    string
		Session *session
		Data    any
	}{p.base, s, data}
	if s != nil && s.Tenant == "" {
		v.Session = nil
	}
	if err := p.pages[name].ExecuteTemplate(&b, "layout", v); err != nil {
		p.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes()) //nolint:errcheck // the browser went away
}
