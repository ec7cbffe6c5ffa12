package form_test

import (
	"context"
	"encoding/json"
	"html/template"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

var orderTmpl = template.Must(template.New("").Parse(`
{{define "form"}}{{with .Problem}}<p>{{.}}</p>{{end}}
<form method="post" action="/topup/send">{{.Field.HTML}}
  <input name="account"> <input name="amount"> <button>Top up</button>
</form>{{end}}
{{define "result"}}<p>Done: {{.}}</p>{{end}}
{{define "error"}}<p>Try again in a moment.</p>{{end}}`))

// topupPages renders the top-up form's three pages.
type topupPages struct{}

func (topupPages) Form(w http.ResponseWriter, r *http.Request, status int, f form.Field, problem error) {
	w.WriteHeader(status)
	msg := ""
	if problem != nil {
		msg = "That form could not be sent; nothing was done. Here is a fresh one."
	}
	orderTmpl.ExecuteTemplate(w, "form", map[string]any{"Field": f, "Problem": msg})
}

func (topupPages) Result(w http.ResponseWriter, r *http.Request, res form.Result) {
	var acc ledger.Account
	if err := res.Decode(&acc); err != nil {
		http.Error(w, "unreadable outcome", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(res.Status) // a replay renders the same page as the first submit
	orderTmpl.ExecuteTemplate(w, "result", acc)
}

func (topupPages) Error(w http.ResponseWriter, r *http.Request, status int, err error) {
	log.Print(err)
	w.WriteHeader(status)
	orderTmpl.ExecuteTemplate(w, "error", nil)
}

// A top-up form that a double click, a reload or Back and submit cannot run
// twice.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TOKEND_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	keys, err := token.NewKeyring(os.Getenv("TOKEND_SECRET_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	handlers := ledger.Handlers()
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		log.Fatal(err)
	}

	topup, err := form.New(form.Config{
		Pool: pool, Issuer: intent.NewIssuer(keys, intent.WithHandlers(handlers)), Spender: spender,
		Tenant: "shop", Operation: ledger.Credit,
		// The amount is typed as text; the ledger wants an integer.
		Payload: func(fields url.Values) ([]byte, error) {
			amount, err := strconv.ParseInt(fields.Get("amount"), 10, 64)
			if err != nil {
				return nil, err // refused: the form is shown again, nothing is done
			}
			return json.Marshal(ledger.Payload{Account: fields.Get("account"), Amount: amount})
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	signedInUser := func(r *http.Request) string { return r.Header.Get("X-User") } // your session here
	h := topup.Handler(topupPages{}, signedInUser)
	// The form is sent to another URL than the page's, so that Back
	// restores the rendered page instead of fetching a new rendering.
	http.Handle("GET /topup", h)
	http.Handle("POST /topup/send", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", nil))
}
