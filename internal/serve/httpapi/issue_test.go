package httpapi_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

var timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

func TestIssueConsumeReplay(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()

	tok := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":100,"trace_id":"t-1"}}`)
	digest, err := token.Digest([]byte(`{"account":"acc_1","amount":100}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !token.ValidID(tok.ID) || !strings.HasPrefix(tok.Token, token.SecretPrefix) || tok.Operation != "ledger.credit" ||
		tok.Subject != "user-1" || tok.State != "issued" || !timeRE.MatchString(tok.ExpiresAt) ||
		tok.PayloadDigest == nil || *tok.PayloadDigest != hex.EncodeToString(digest) {
		t.Errorf("issue = %s", tok.raw.body)
	}
	if h := tok.raw.header.Get("Idempotent-Replayed"); h != "" {
		t.Errorf("first issue: Idempotent-Replayed = %q, want none", h)
	}
	if cc := tok.raw.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("issue: Cache-Control = %q, want no-store: the body holds a secret", cc)
	}

	// The same intent, spelled differently and with another trace id.
	again := a.issue(key, "order-1", `{"ttl_seconds":300,"payload":{"trace_id":"t-2","amount":100,"account":"acc_1"},"subject":"user-1","operation":"ledger.credit"}`)
	if !bytes.Equal(again.raw.body, tok.raw.body) || again.raw.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-issue = %s (replayed %q)\nwant %s (replayed true)", again.raw.body, again.raw.header.Get("Idempotent-Replayed"), tok.raw.body)
	}
	if n := a.count("tokens"); n != 1 {
		t.Errorf("%d tokens after a re-issue, want 1", n)
	}

	spend := spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":100}`)
	first := a.post(key, "/v1/tokens/consume", spend)
	want := fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"account":"acc_1","balance":100}}`, tok.ID)
	if first.status != http.StatusOK || string(first.body) != want || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("consume = %d %s (replayed %q), want 200 %s", first.status, first.body, first.header.Get("Idempotent-Replayed"), want)
	}
	// A retry after a lost response, with a new trace id: same answer, no second effect.
	retry := a.post(key, "/v1/tokens/consume", strings.Replace(spend, `"amount":100}`, `"amount":100,"trace_id":"t-3"}`, 1))
	if retry.status != first.status || !bytes.Equal(retry.body, first.body) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-consume = %d %s (replayed %q), want %d %s (replayed true)", retry.status, retry.body, retry.header.Get("Idempotent-Replayed"), first.status, first.body)
	}
	if b := a.balance("acme", "acc_1"); b != 100 {
		t.Errorf("balance = %d, want 100: one effect", b)
	}
	if n := a.count("ledger_entries"); n != 1 {
		t.Errorf("%d ledger entries, want 1", n)
	}
	if res := a.get(key, "/v1/ledger/accounts/acc_1"); res.status != http.StatusOK || string(res.body) != `{"account":"acc_1","balance":100}` {
		t.Errorf("GET account = %d %s", res.status, res.body)
	}

	// Re-issuing after the spend still answers what the issue answered.
	late := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":100}}`)
	if !bytes.Equal(late.raw.body, tok.raw.body) {
		t.Errorf("re-issue after spend = %s, want %s", late.raw.body, tok.raw.body)
	}

	res := a.get(key, "/v1/tokens/"+tok.ID)
	var view struct {
		ID, Operation, Subject, State string
		Generation                    int64
		CreatedAt                     string  `json:"created_at"`
		ExpiresAt                     string  `json:"expires_at"`
		OperationID                   *string `json:"operation_id"`
		LeaseExpiresAt                *string `json:"lease_expires_at"`
		FinishedAt                    *string `json:"finished_at"`
	}
	mustUnmarshal(t, res.body, &view)
	if res.status != http.StatusOK || view.ID != tok.ID || view.State != "consumed" || view.ExpiresAt != tok.ExpiresAt ||
		!timeRE.MatchString(view.CreatedAt) || view.FinishedAt == nil || view.OperationID != nil || view.LeaseExpiresAt != nil {
		t.Errorf("GET token = %d %s", res.status, res.body)
	}
	if bytes.Contains(res.body, []byte(token.SecretPrefix)) {
		t.Errorf("GET token shows a secret: %s", res.body)
	}

	// Nothing secret reached the log, and every line has its request id.
	logs := a.log.String()
	for _, secret := range []string{tok.Token, key, token.SecretPrefix, "Bearer", "user-1"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log contains %q:\n%s", secret, logs)
		}
	}
	if n := strings.Count(logs, `"request_id":"`); n != strings.Count(logs, "\n") || n < 6 {
		t.Errorf("%d request ids in %d log lines:\n%s", n, strings.Count(logs, "\n"), logs)
	}
}

func TestIssueKeyReused(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	body := `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":100}}`
	tok := a.issue(key, "order-1", body)

	for _, changed := range []string{
		strings.Replace(body, `"amount":100`, `"amount":1000`, 1),
		strings.Replace(body, `"user-1"`, `"user-2"`, 1),
		strings.Replace(body, `300`, `301`, 1),
		`{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`,
	} {
		res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: key, body: changed, header: http.Header{"Idempotency-Key": {"order-1"}}})
		wantProblem(t, res, http.StatusUnprocessableEntity, "idempotency_key_reused")
	}
	if n := a.count("tokens"); n != 1 {
		t.Errorf("%d tokens, want 1", n)
	}
	// The token is still bound to the first payload.
	spend := spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":1000}`)
	wantProblem(t, a.post(key, "/v1/tokens/consume", spend), http.StatusUnprocessableEntity, "payload_mismatch")
	// A spend without the payload is told the token is bound to one.
	for _, none := range []string{
		fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1"}`, tok.Token),
		fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":null}`, tok.Token),
	} {
		res := a.post(key, "/v1/tokens/consume", none)
		wantProblem(t, res, http.StatusUnprocessableEntity, "payload_missing")
		if !strings.Contains(string(res.body), "issued for a payload") {
			t.Errorf("a spend without the payload is told %s", res.body)
		}
	}
	if s, _ := a.tokenState(tok.ID); s != token.Issued || a.balance("acme", "acc_1") != 0 {
		t.Errorf("after a payload mismatch: state %s, balance %d; want issued, 0", s, a.balance("acme", "acc_1"))
	}
	if again := a.issue(key, "order-1", body); !bytes.Equal(again.raw.body, tok.raw.body) {
		t.Errorf("re-issue = %s, want %s", again.raw.body, tok.raw.body)
	}
}

func TestIssueNeedsIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	body := `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`
	for _, h := range []http.Header{nil, {"Idempotency-Key": {""}}} {
		res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: a.client(), body: body, header: h})
		wantProblem(t, res, http.StatusBadRequest, "idempotency_key_missing")
	}
	if n := a.count("tokens"); n != 0 {
		t.Errorf("%d tokens, want 0", n)
	}
}

// TestIssueReplaySaysTheStateNow: the replay of an issue answers the first
// body byte for byte, and its Token-State header says what the token is
// now: expired once past its expiry (swept or not), consumed once spent.
func TestIssueReplaySaysTheStateNow(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	body := `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":1}`
	first := a.issue(key, "order-exp", body)
	if got := first.raw.header.Get("Token-State"); got != "issued" {
		t.Errorf("first issue: Token-State %q, want issued", got)
	}
	spent := a.issue(key, "order-spent", body)
	if res := a.post(key, "/v1/tokens/consume", spendBody(spent, "ledger.credit", "user-1", `{"account":"acc_1","amount":1}`)); res.status != http.StatusOK {
		t.Fatalf("spend: %d %s", res.status, res.body)
	}
	// Wait out the one-second TTL: the replay must show the expires_at the
	// first answer had, so the row's expiry cannot be moved instead.
	for a.tokenStateNow(key, first.ID) != "expired" {
		time.Sleep(50 * time.Millisecond)
	}

	for _, tt := range []struct {
		intent string
		was    issued
		want   string
	}{{"order-exp", first, "expired"}, {"order-spent", spent, "consumed"}} {
		again := a.issue(key, tt.intent, body)
		if !bytes.Equal(again.raw.body, tt.was.raw.body) || again.raw.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: replay %s, want %s byte for byte, replayed", tt.intent, again.raw.body, tt.was.raw.body)
		}
		if got := again.raw.header.Get("Token-State"); got != tt.want {
			t.Errorf("%s: replay's Token-State %q, want %s", tt.intent, got, tt.want)
		}
		if got := a.get(key, "/v1/tokens/"+tt.was.ID); !strings.Contains(string(got.body), `"state":"`+tt.want+`"`) {
			t.Errorf("%s: GET says %s, want %s like the header", tt.intent, got.body, tt.want)
		}
	}
}

// tokenStateNow is the token's state as GET /v1/tokens/{id} reports it.
func (a *api) tokenStateNow(key, id string) string {
	a.t.Helper()
	var v map[string]any
	mustUnmarshal(a.t, a.get(key, "/v1/tokens/"+id).body, &v)
	s, _ := v["state"].(string)
	return s
}

// A payload the handler would refuse at spend is refused at issue, with the
// field and the rule, in the API's words; nothing is written.
func TestIssueValidatesPayloadWithHandler(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	if res := a.putOperation("pay.card", `{"mode":"lease"}`); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}
	tests := []struct {
		name, op, payload, field string
	}{
		{"amount a string", "ledger.credit", `{"account":"a","amount":"5"}`, "payload.amount"},
		{"amount negative", "ledger.credit", `{"account":"a","amount":-5}`, "payload.amount"},
		{"amount zero", "ledger.credit", `{"account":"a","amount":0}`, "payload.amount"},
		{"amount fractional", "ledger.credit", `{"account":"a","amount":1.5}`, "payload.amount"},
		{"amount in exponent form", "ledger.credit", `{"account":"a","amount":1e3}`, "payload.amount"},
		{"amount too large", "ledger.credit", `{"account":"a","amount":1000000000001}`, "payload.amount"},
		{"amount null", "ledger.credit", `{"account":"a","amount":null}`, "payload.amount"},
		{"amount missing", "ledger.credit", `{"account":"a"}`, "payload.amount"},
		{"account missing", "ledger.credit", `{"amount":5}`, "payload.account"},
		{"account a number", "ledger.credit", `{"account":7,"amount":5}`, "payload.account"},
		{"account malformed", "ledger.debit", `{"account":"a b","amount":5}`, "payload.account"},
		{"unknown field", "ledger.debit", `{"account":"a","amount":5,"admin":true}`, "payload.admin"},
		{"not an object", "ledger.credit", `[1,2]`, "payload "},
		{"a string", "ledger.debit", `"five"`, "payload "},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := a.count("tokens")
			res := a.issueRaw(fmt.Sprint("bad-", i), fmt.Sprintf(`{"operation":%q,"subject":"u","ttl_seconds":60,"payload":%s}`, tc.op, tc.payload))
			p := wantProblem(t, res, http.StatusBadRequest, "invalid_request")
			if !strings.Contains(p.Detail, tc.field) {
				t.Errorf("detail %q does not name %q", p.Detail, tc.field)
			}
			for _, internal := range []string{"Go ", "struct", "unmarshal", "json:", "int64", "Payload."} {
				if strings.Contains(p.Detail, internal) {
					t.Errorf("detail %q shows Go internals (%q)", p.Detail, internal)
				}
			}
			if n := a.count("tokens"); n != before {
				t.Errorf("%d tokens after a refused issue, want %d", n, before)
			}
		})
	}
	// A spend is refused in the same words.
	tok := a.issue(a.client(), "unbound", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`)
	p := wantProblem(t, a.post(a.client(), "/v1/tokens/consume", spendBody(tok, "ledger.credit", "u", `{"account":"a","amount":"5"}`)),
		http.StatusBadRequest, "invalid_request")
	if !strings.Contains(p.Detail, "payload.amount must be an integer") || strings.Contains(p.Detail, "unmarshal") {
		t.Errorf("spend detail = %q, want payload.amount and its rule", p.Detail)
	}
	// An operation without a handler leaves its payload to whoever executes it.
	a.issue(a.client(), "lease", `{"operation":"pay.card","subject":"u","ttl_seconds":60,"payload":{"amount":"5"}}`)
}

// ttl_seconds is required, as the README says: an issue without it, or with
// zero, is refused and issues nothing.
func TestIssueNeedsTTL(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tests := []struct{ name, body string }{
		{"absent", `{"operation":"ledger.credit","subject":"u"}`},
		{"null", `{"operation":"ledger.credit","subject":"u","ttl_seconds":null}`},
		{"zero", `{"operation":"ledger.credit","subject":"u","ttl_seconds":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: key, body: tt.body, header: http.Header{"Idempotency-Key": {"ttl-" + tt.name}}})
			if p := wantProblem(t, res, http.StatusBadRequest, "invalid_request"); !strings.Contains(p.Detail, "ttl_seconds") {
				t.Errorf("%s: detail %q should name ttl_seconds", tt.name, p.Detail)
			}
		})
	}
	if n := a.count("tokens"); n != 0 {
		t.Errorf("%d tokens issued, want none", n)
	}
}
