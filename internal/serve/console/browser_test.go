package console_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/internal/testkit/browsertest"
	"github.com/tokend/tokend/token"
)

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// signIn signs the operator in with key and waits for the token list, on
// the tab it lands on.
func signIn(tab *browsertest.Tab, s *server, key string) {
	tab.Do(chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible(css("#key")))
	tab.Shot("signin")
	tab.Do(
		chromedp.SendKeys(css("#key"), key),
		chromedp.Click(css("main button")),
		chromedp.WaitVisible(css(".tabs .current")),
	)
}

// An operator revokes the token of a form a user has open; the user's
// submit then says so, shows a fresh form, and credits nothing.
func TestRevokeFormToken(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	b := browsertest.New(t)
	user, operator := b.Tab("user"), b.Tab("operator")
	user.DisableScripts()
	user.Do(
		chromedp.Navigate(s.URL+"/demo/signin"),
		chromedp.SendKeys(css("#name"), "alice"),
		chromedp.Click(css("main button")),
		chromedp.WaitVisible(css("#topup")),
		chromedp.SetValue(css("#amount"), "40"),
	)
	var id string
	field := token.Secret(user.Value(`input[name="tokend_token"]`))
	if err := s.pool.QueryRow(t.Context(), `SELECT id FROM tokens WHERE secret_hash = $1`, field.Hash()).Scan(&id); err != nil {
		t.Fatal(err)
	}

	signIn(operator, s, s.operatorKey)
	operator.Shot("tokens-unknown")
	operator.Do(
		chromedp.Click(css("#tab-issued")),
		chromedp.WaitVisible(css("#tab-issued.current")),
	)
	operator.Shot("tokens-issued")
	operator.Do(
		chromedp.Click(css(`#tokens a[href$="/tokens/`+id+`"]`)),
		chromedp.WaitVisible(css("#revoke")),
	)
	operator.Shot("token-issued")
	operator.Do(chromedp.Click(css("#revoke")), chromedp.WaitVisible(css("#confirm")))
	operator.Shot("revoke-confirm")
	if st := s.state(t, id); st != token.Issued {
		t.Fatalf("the confirmation page alone moved the token to %s", st)
	}
	operator.Do(
		chromedp.SendKeys(css("#reason"), "suspicious top-up"),
		chromedp.Click(css("#confirm")),
		chromedp.WaitVisible(css("#done")),
	)
	operator.Shot("token-revoked")
	if got := operator.Text("#state"); got != "revoked" {
		t.Errorf("the token page says %s, want revoked", got)
	}
	if timeline := operator.Text("#timeline"); !strings.Contains(timeline, "revoke") || !strings.Contains(timeline, "key_") {
		t.Errorf("timeline %q, want the revoke by the operator's key", timeline)
	}

	user.Do(chromedp.Click(css("#submit")), chromedp.WaitVisible(css("#problem")))
	user.Shot("revoked-form")
	if msg := user.Text("#problem"); !strings.Contains(msg, "cancelled by an operator") {
		t.Errorf("the user is told %q, want that an operator cancelled the form", msg)
	}
	if fresh := user.Value(`input[name="tokend_token"]`); fresh == string(field) {
		t.Error("the form shown after the refusal carries the revoked token")
	}
	var entries int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_entries`).Scan(&entries); err != nil || entries != 0 {
		t.Errorf("%d ledger entries, %v; want 0", entries, err)
	}
}

// An operator reconciles a token whose outcome is unknown; from then on a
// spend of it gets the outcome the operator recorded.
func TestReconcileUnknown(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	iss := s.unknown(t)
	spend := func() (consume.Response, error) {
		return s.spender.Spend(t.Context(), s.pool, consume.Request{Tenant: tenant, Secret: iss.Secret, Operation: leaseOp, Subject: "alice", Actor: "test"})
	}
	if _, err := spend(); !errors.Is(err, token.ErrOutcomeUnknown) {
		t.Fatalf("spend before the reconciliation = %v, want token.ErrOutcomeUnknown", err)
	}

	operator := browsertest.New(t).Tab("operator")
	signIn(operator, s, s.operatorKey)
	if got := operator.Text("#tab-unknown .count"); got != "1" {
		t.Errorf("the unknown tab counts %s tokens, want 1", got)
	}
	operator.Do(
		chromedp.Click(css(`#tokens a[href$="/tokens/`+iss.Token.ID+`"]`)),
		chromedp.WaitVisible(css("#reconcile")),
	)
	operator.Shot("token-unknown")
	operator.Do(chromedp.Click(css("#reconcile")), chromedp.WaitVisible(css("#confirm")))
	operator.Do(
		chromedp.Click(css("#outcome-succeeded")),
		chromedp.SendKeys(css("#status"), "201"),
		chromedp.SendKeys(css("#result"), `{"captured": true, "amount": 1200}`),
	)
	operator.Shot("reconcile-confirm")
	operator.Do(chromedp.Click(css("#confirm")), chromedp.WaitVisible(css("#done")))
	operator.Shot("token-reconciled")
	if got := operator.Text("#state"); got != "consumed" {
		t.Errorf("the token page says %s, want consumed", got)
	}
	if got := operator.Text("#outcome"); !strings.Contains(got, `"captured": true`) {
		t.Errorf("the stored outcome shown is %q, want the recorded result", got)
	}

	resp, err := spend()
	want := fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"captured":true,"amount":1200}}`, iss.Token.ID)
	if err != nil || !resp.Replayed || resp.Status != 201 || resp.State != token.Consumed || !bytes.Equal(resp.Body, []byte(want)) {
		t.Errorf("spend after the reconciliation = %d %s replayed %v, %v; want 201 %s replayed", resp.Status, resp.Body, resp.Replayed, err, want)
	}
	operator.Do(chromedp.Navigate(s.URL+"/console/tokens?state=unknown"), chromedp.WaitVisible(css("#empty")))
	if got := operator.Text("#empty"); !strings.Contains(got, "No token waits") {
		t.Errorf("the unknown tab says %q after the reconciliation, want that none waits", got)
	}
}
