package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/token"
)

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
	if res := a.post(acme, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":{"account":"acc_1","amount":7}}`, credit.Token)); res.status != http.StatusOK {
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
