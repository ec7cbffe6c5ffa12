package form_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/tokendtest"
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
// twice: here the same rendered form is submitted twice, and the account is
// credited once; the second submit gets the first one's page again.
func Example() {
	ctx := context.Background()
	// A database with tokend's schema and the ledger's, a keyring and the
	// ledger's handlers; a program has its pool, keyring and handlers.
	kit, cleanup := tokendtest.ForExample(ledger.Handlers(), ledger.Migrations)
	defer cleanup()
	pool := kit.Pool

	topup, err := form.New(form.Config{
		Pool: pool, Issuer: kit.Issuer, Spender: kit.Spender,
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
	mux := http.NewServeMux()
	mux.Handle("GET /topup", h)
	mux.Handle("POST /topup/send", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// A browser: it follows the redirect to a rendering of its own and
	// reads the form.
	send := func(method, path string, fields url.Values) (int, string) {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(fields.Encode()))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-User", "user-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	_, page := send(http.MethodGet, "/topup", nil)
	field := regexp.MustCompile(`name="` + form.FieldName + `" value="([^"]+)"`).FindStringSubmatch(page)
	if field == nil {
		log.Fatal("no token field in the form: ", page)
	}
	submit := url.Values{form.FieldName: {field[1]}, "account": {"acct-42"}, "amount": {"5"}}
	for range 2 { // a double click
		fmt.Println(send(http.MethodPost, "/topup/send", submit))
	}
	balance, err := ledger.Balance(ctx, pool, "shop", "acct-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", balance)
	// Output:
	// 200 <p>Done: {acct-42 5}</p>
	// 200 <p>Done: {acct-42 5}</p>
	// balance 5
}
