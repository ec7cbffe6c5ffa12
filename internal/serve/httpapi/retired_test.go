package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// TestRetiredServerKey serves one database with the key tokens were issued
// under, then with a keyring that retired it: a spend of an old token is
// 410 token_key_retired whatever its state (no effect, no replay, no
// event), a re-issue of its intent is 410 intent_key_retired naming the
// token, a new intent works, and every refusal is counted and logged at WARN
// with the request id, never the secret.
func TestRetiredServerKey(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
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
