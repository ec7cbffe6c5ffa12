package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/token"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	client, operator := a.client(), a.operator()
	revokedKey := a.key("acme-old", apikey.Client)
	if _, err := apikey.Revoke(context.Background(), a.pool, "acme-old", a.keyIDs["acme-old/client"]); err != nil {
		t.Fatal(err)
	}
	issue := `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`

	tests := []struct {
		name          string
		authorization string
		method, path  string
		body          string
		status        int
		code          string
	}{
		{"no header", "", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"basic scheme", "Basic " + client, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"bearer, no key", "Bearer ", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"bare key", client, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"unknown key", "Bearer tkd_" + strings.Repeat("A", 43), http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"malformed key", "Bearer nope", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"revoked key", "Bearer " + revokedKey, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"token secret as key", "Bearer tks_" + strings.Repeat("A", 43), http.MethodGet, "/v1/admin/operations", "", 401, "unauthorized"},
		{"no key on admin", "", http.MethodGet, "/v1/admin/operations", "", 401, "unauthorized"},
		{"client on admin list", "Bearer " + client, http.MethodGet, "/v1/admin/operations", "", 403, "forbidden"},
		{"client on admin put", "Bearer " + client, http.MethodPut, "/v1/admin/operations/pay.card", `{"mode":"lease"}`, 403, "forbidden"},
		{"operator on client route", "Bearer " + operator, http.MethodPost, "/v1/tokens", issue, 201, ""},
		{"lower-case scheme", "bearer " + client, http.MethodPost, "/v1/tokens", issue, 201, ""},
		{"operator on admin", "Bearer " + operator, http.MethodGet, "/v1/admin/operations", "", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Idempotency-Key": {tt.name}}
			if tt.authorization != "" {
				h.Set("Authorization", tt.authorization)
			}
			res := a.do(request{method: tt.method, path: tt.path, body: tt.body, header: h})
			if tt.code == "" {
				if res.status != tt.status {
					t.Errorf("got %d %s, want %d", res.status, res.body, tt.status)
				}
				return
			}
			wantProblem(t, res, tt.status, tt.code)
			if got := res.header.Get("WWW-Authenticate"); (tt.status == 401) != strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate = %q on a %d", got, tt.status)
			}
		})
	}
	// Only the two admitted issues made tokens; the refused PUT declared nothing.
	if n := a.count("tokens"); n != 2 {
		t.Errorf("%d tokens, want 2", n)
	}
	if n := a.count("operations"); n != 0 {
		t.Errorf("%d operations declared, want 0", n)
	}
}

// TestTenantIsolation: whatever globex does with acme's token id, secret,
// account or operation, the answer is exactly the one for something that
// does not exist, and acme's data is untouched.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	acme, globex := a.client(), a.key("globex", apikey.Client)
	globexOp := a.key("globex", apikey.Operator)

	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: a.operator(), body: `{"mode":"lease"}`}); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}
	credit := a.issue(acme, "i-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(acme, "/v1/tokens/consume", spendBody(credit, "ledger.credit", "user-1", `{"account":"acc_1","amount":7}`)); res.status != http.StatusOK {
		t.Fatalf("consume = %d %s", res.status, res.body)
	}
	issuedTok := a.issue(acme, "i-2", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	pending := a.issue(acme, "i-3", `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(acme, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, pending.Token)); res.status != http.StatusAccepted {
		t.Fatalf("consume = %d %s", res.status, res.body)
	}

	missingID := token.NewID()
	missingSecret := token.SecretPrefix + strings.Repeat("A", 43)
	spend := func(secret, op string) string {
		return fmt.Sprintf(`{"token":%q,"operation":%q,"subject":"user-1","payload":{"account":"acc_1","amount":7}}`, secret, op)
	}
	// Each case is asked twice by globex: with acme's thing and with a missing one.
	tests := []struct {
		name                  string
		key, method           string
		acmePath, missingPath string
		acmeBody, missingBody string
		wantStatus            int
	}{
		{"get token", globex, http.MethodGet, "/v1/tokens/" + issuedTok.ID, "/v1/tokens/" + missingID, "", "", 404},
		{"get consumed token", globex, http.MethodGet, "/v1/tokens/" + credit.ID, "/v1/tokens/" + missingID, "", "", 404},
		{"consume issued", globex, http.MethodPost, "/v1/tokens/consume", "/v1/tokens/consume", spend(issuedTok.Token, "ledger.credit"), spend(missingSecret, "ledger.credit"), 404},
		{"consume consumed", globex, http.MethodPost, "/v1/tokens/consume", "/v1/tokens/consume", spend(credit.Token, "ledger.credit"), spend(missingSecret, "ledger.credit"), 404},
		{"consume pending", globex, http.MethodPost, "/v1/tokens/consume", "/v1/tokens/consume", spend(pending.Token, "pay.card"), spend(missingSecret, "pay.card"), 404},
		{"complete", globex, http.MethodPost, "/v1/tokens/" + pending.ID + "/complete", "/v1/tokens/" + missingID + "/complete", `{"generation":1}`, `{"generation":1}`, 404},
		{"fail", globex, http.MethodPost, "/v1/tokens/" + pending.ID + "/fail", "/v1/tokens/" + missingID + "/fail", `{"generation":1}`, `{"generation":1}`, 404},
		{"unknown", globex, http.MethodPost, "/v1/tokens/" + pending.ID + "/unknown", "/v1/tokens/" + missingID + "/unknown", `{"generation":1}`, `{"generation":1}`, 404},
		{"account", globex, http.MethodGet, "/v1/ledger/accounts/acc_1", "/v1/ledger/accounts/acc_1", "", "", 200},
		{"operation", globexOp, http.MethodGet, "/v1/admin/operations/pay.card", "/v1/admin/operations/pay.card", "", "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other := a.do(request{method: tt.method, path: tt.acmePath, key: tt.key, body: tt.acmeBody})
			// Delete nothing, create nothing: the missing case is asked
			// against a path or secret that never existed in any tenant.
			missing := a.do(request{method: tt.method, path: tt.missingPath, key: tt.key, body: tt.missingBody})
			if other.status != tt.wantStatus || other.status != missing.status || !bytes.Equal(other.body, missing.body) ||
				other.header.Get("Content-Type") != missing.header.Get("Content-Type") {
				t.Errorf("another tenant's: %d %s\nmissing:          %d %s\nwant the same %d", other.status, other.body, missing.status, missing.body, tt.wantStatus)
			}
		})
	}
	if res := a.get(globex, "/v1/ledger/accounts/acc_1"); string(res.body) != `{"account":"acc_1","balance":0}` {
		t.Errorf("globex sees acme's balance: %s", res.body)
	}

	// acme's tokens and balance are as acme left them.
	for id, want := range map[string]token.State{credit.ID: token.Consumed, issuedTok.ID: token.Issued, pending.ID: token.Pending} {
		if s, _ := a.tokenState(id); s != want {
			t.Errorf("acme's token %s is %s, want %s", id, s, want)
		}
	}
	if b := a.balance("acme", "acc_1"); b != 7 {
		t.Errorf("acme's balance = %d, want 7", b)
	}
	if b := a.balance("globex", "acc_1"); b != 0 {
		t.Errorf("globex's balance = %d, want 0", b)
	}
	var events int
	if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM token_events WHERE actor LIKE $1`, a.keyIDs["globex/client"]).Scan(&events); err != nil || events != 0 {
		t.Errorf("globex's key acted on %d tokens (%v), want 0", events, err)
	}

	// The same intent id in another tenant is another intent.
	theirs := a.issue(globex, "i-2", `{"operation":"ledger.credit","subject":"user-9","ttl_seconds":60}`)
	if theirs.ID == issuedTok.ID || theirs.raw.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("globex's issue with acme's intent id = %s (replayed %q)", theirs.raw.body, theirs.raw.header.Get("Idempotent-Replayed"))
	}
}

// TestRetiredServerKey serves one database with the key tokens were issued
// under, then with a keyring that retired it: a spend of an old token is
// 410 token_key_retired whatever its state (no effect, no replay, no
// event), a re-issue of its intent is 410 intent_key_retired naming the
// token, a new intent works, and every refusal is counted and logged at WARN
// with the request id, never the secret.
func TestRetiredServerKey(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	before := newAPIOn(t, pool) // issues under newAPIOn's key
	key := before.client()

	unspent := before.issue(key, "retire-unspent", creditBody("alice", 5))
	spent := before.issue(key, "retire-spent", creditBody("alice", 7))
	if res := before.post(key, "/v1/tokens/consume", consumeBody(spent, "alice", 7)); res.status != http.StatusOK {
		t.Fatalf("spend before retirement: %d %s", res.status, res.body)
	}

	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	after := newAPIOn(t, pool, func(cfg *httpapi.Config) {
		keys, err := token.NewKeyring("a-new-server-key-after-the-leak-0123456789")
		if err != nil {
			t.Fatal(err)
		}
		h := consume.NewRegistry()
		ledger.Register(h)
		if cfg.Spender, err = consume.New(consume.Config{Handlers: h, Keys: keys}); err != nil {
			t.Fatal(err)
		}
		cfg.Issuer, cfg.Metrics = intent.NewIssuer(keys, intent.WithHandlers(cfg.Spender.Handlers())), m
	})

	effects := func() [3]int {
		return [3]int{int(after.balance("acme", "alice")), after.count("token_events"), after.count("ledger_entries")}
	}
	was := effects()
	send := func(reqID, method, path, body string, h http.Header) response {
		if h == nil {
			h = http.Header{}
		}
		h.Set(httpapi.RequestIDHeader, reqID)
		return after.do(request{method: method, path: path, key: key, body: body, header: h})
	}
	for i, tc := range []struct {
		name string
		tok  issued
		body string
	}{
		{"unspent", unspent, consumeBody(unspent, "alice", 5)},
		{"spent, not replayed", spent, consumeBody(spent, "alice", 7)},
		{"other subject", unspent, strings.Replace(consumeBody(unspent, "alice", 5), `"subject":"alice"`, `"subject":"mallory"`, 1)},
	} {
		res := send("retired-spend-"+string(rune('a'+i)), http.MethodPost, "/v1/tokens/consume", tc.body, nil)
		wantProblem(t, res, http.StatusGone, "token_key_retired")
		if res.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("%s: a refusal marked as a replay", tc.name)
		}
	}
	if s, _ := after.tokenState(unspent.ID); s != token.Issued {
		t.Fatalf("unspent token is %s after refused spends", s)
	}

	for range 2 { // a retry gets the same answer, not a 500
		res := send("retired-issue", http.MethodPost, "/v1/tokens", creditBody("alice", 5), http.Header{"Idempotency-Key": {"retire-unspent"}})
		if p := wantProblem(t, res, http.StatusGone, "intent_key_retired"); !strings.Contains(p.Detail, unspent.ID) {
			t.Fatalf("detail %q does not name the token", p.Detail)
		}
		if strings.Contains(string(res.body), "tks_") {
			t.Fatalf("refusal carries a secret: %s", res.body)
		}
	}
	if got := effects(); got != was {
		t.Fatalf("refusals changed balance, events, entries from %v to %v", was, got)
	}

	fresh := after.issue(key, "retire-new", creditBody("alice", 3))
	if res := after.post(key, "/v1/tokens/consume", consumeBody(fresh, "alice", 3)); res.status != http.StatusOK {
		t.Fatalf("new intent's spend: %d %s", res.status, res.body)
	}
	if got := after.balance("acme", "alice"); got != 10 {
		t.Fatalf("balance = %d, want 10", got)
	}

	scrape := string(after.get("", "/metrics").body)
	for _, want := range []string{
		`tokend_retired_key_refusals_total{action="spend"} 3`,
		`tokend_retired_key_refusals_total{action="issue"} 2`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	logs := after.log.String()
	warned := map[string]int{}
	for line := range strings.Lines(logs) {
		var l struct {
			Level       string `json:"level"`
			RequestID   string `json:"request_id"`
			TokenID     string `json:"token_id"`
			ServerKeyID string `json:"server_key_id"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if l.Level != "WARN" {
			continue
		}
		warned[l.RequestID]++
		if strings.HasPrefix(l.RequestID, "retired-spend-") && (!token.ValidID(l.TokenID) || l.ServerKeyID == "") {
			t.Errorf("spend WARN without token and key ids: %s", line)
		}
	}
	if warned["retired-spend-a"] != 1 || warned["retired-spend-b"] != 1 || warned["retired-spend-c"] != 1 || warned["retired-issue"] != 2 {
		t.Errorf("WARN lines by request id = %v, want one per refusal", warned)
	}
	for _, secret := range []string{unspent.Token, spent.Token} {
		if strings.Contains(logs, secret) {
			t.Fatal("a secret reached the log")
		}
	}
}
