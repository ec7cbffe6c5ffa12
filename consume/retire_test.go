package consume_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// Server keys of the rotation tests: newEnv issues under oldKey.
const (
	oldKey = "test-server-key-0123456789abcdef0123456789"
	newKey = "rotated-server-key-0123456789abcdef0123456789"
)

func keyring(t *testing.T, current string, previous ...string) *token.Keyring {
	t.Helper()
	k, err := token.NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// spenderWith is e's Spender, with keys instead of e's keyring.
func (e *env) spenderWith(keys *token.Keyring) *consume.Spender {
	e.t.Helper()
	h := ledger.Handlers()
	s, err := consume.New(consume.Config{Handlers: h, Keys: keys})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// effects is everything a spend could change about a token and the ledger.
type effects struct {
	state       token.State
	generation  int64
	events      int
	entries     int
	leaseExpiry string
}

func (e *env) effects(id, account string) effects {
	e.t.Helper()
	var f effects
	err := e.pool.QueryRow(context.Background(), `
SELECT state, generation, coalesce(lease_expires_at::text, ''),
       (SELECT count(*) FROM token_events WHERE tenant_id = $1 AND token_id = $2)
FROM tokens WHERE tenant_id = $1 AND id = $2`, tenant, id).Scan(&f.state, &f.generation, &f.leaseExpiry, &f.events)
	if err != nil {
		e.t.Fatal(err)
	}
	f.entries = e.entries(account)
	return f
}

// TestSpendRefusesRetiredKey: once the key a token's secret derives from is
// out of the keyring, every spend of it is refused with token.ErrKeyRetired
// before anything else is looked at (binding, state, stored outcome), and
// nothing changes: no effect, no event, no lease.
func TestSpendRefusesRetiredKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryTakeover)

	issued := e.issue(ledger.Credit, "alice", credit("alice", 5))
	consumed := e.issue(ledger.Credit, "alice", credit("alice", 7))
	if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(consumed, credit("alice", 7))); err != nil {
		t.Fatal(err)
	}
	lapsed := e.issue(payOp, "alice", nil)
	e.grant(lapsed)
	e.lapseLease(lapsed.Token.ID) // a spend would take it over
	leaseable := e.issue(payOp, "alice", nil)

	retired := e.spenderWith(keyring(t, newKey))
	tests := []struct {
		name   string
		is     intent.Issued
		mutate func(*consume.Request)
	}{
		{"issued", issued, func(*consume.Request) {}},
		{"consumed, not replayed", consumed, func(r *consume.Request) { r.Payload = mustJSON(t, credit("alice", 7)) }},
		{"lease lapsed, not taken over", lapsed, func(r *consume.Request) { r.Payload = mustJSON(t, map[string]any{"amount": 1}) }},
		{"lease mode, not granted", leaseable, func(r *consume.Request) { r.Payload = mustJSON(t, map[string]any{"amount": 1}) }},
		{"other subject", issued, func(r *consume.Request) { r.Subject = "mallory" }},
		{"other payload", issued, func(r *consume.Request) { r.Payload = mustJSON(t, credit("alice", 500)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.effects(tc.is.Token.ID, "alice")
			req := e.spendReq(tc.is, credit("alice", 5))
			tc.mutate(&req)

			resp, err := retired.Spend(ctx, e.pool, req)
			var kr *consume.KeyRetiredError
			if !errors.Is(err, token.ErrKeyRetired) || !errors.As(err, &kr) {
				t.Fatalf("spend = %+v, %v; want token.ErrKeyRetired", resp, err)
			}
			if kr.TokenID != tc.is.Token.ID || kr.KeyID != token.KeyID(oldKey) {
				t.Fatalf("error names token %s key %s, want %s %s", kr.TokenID, kr.KeyID, tc.is.Token.ID, token.KeyID(oldKey))
			}
			if resp.Body != nil || resp.Replayed {
				t.Fatalf("a refused spend answered %q replayed=%v", resp.Body, resp.Replayed)
			}
			if after := e.effects(tc.is.Token.ID, "alice"); after != before {
				t.Fatalf("refused spend changed %+v into %+v", before, after)
			}

			// In the caller's transaction too (library mode).
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // refused: nothing to keep
			if _, err := retired.SpendTx(ctx, tx, req); !errors.Is(err, token.ErrKeyRetired) {
				t.Fatalf("SpendTx = %v, want token.ErrKeyRetired", err)
			}
		})
	}
	if got := e.balance("alice"); got != 7 {
		t.Fatalf("balance = %d, want 7 (the one spend made before the key was retired)", got)
	}

	// A lease holder quotes the token id and generation, not the secret:
	// its report still lands after the key is retired.
	held := e.issue(payOp, "alice", nil)
	lease := e.grant(held)
	if resp, err := consume.Finish(ctx, e.pool, token.Complete, report(held, lease.Generation, map[string]string{"ok": "yes"})); err != nil || resp.State != token.Consumed {
		t.Fatalf("complete after retirement = %+v, %v", resp, err)
	}
}

// TestSpendAfterRotation: a rotated keyring (new current key, old one kept
// as previous) still spends tokens derived under the old key, and new
// tokens under the new one; retiring the old key leaves the new tokens
// spendable.
func TestSpendAfterRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	old := e.issue(ledger.Credit, "bob", credit("bob", 2))

	rotated := keyring(t, newKey, oldKey)
	e.issuer, e.spender = intent.NewIssuer(rotated, intent.WithHandlers(e.spender.Handlers())), e.spenderWith(rotated)
	fresh := e.issue(ledger.Credit, "bob", credit("bob", 3))
	for _, tc := range []struct {
		is     intent.Issued
		amount int64
	}{{old, 2}, {fresh, 3}} {
		if resp, err := e.spender.Spend(ctx, e.pool, e.spendReq(tc.is, credit("bob", tc.amount))); err != nil || resp.Status != http.StatusOK || resp.Replayed {
			t.Fatalf("spend after rotation = %+v, %v", resp, err)
		}
	}

	retired := e.spenderWith(keyring(t, newKey))
	if _, err := retired.Spend(ctx, e.pool, e.spendReq(old, credit("bob", 2))); !errors.Is(err, token.ErrKeyRetired) {
		t.Fatalf("old token after retirement: %v, want token.ErrKeyRetired", err)
	}
	if resp, err := retired.Spend(ctx, e.pool, e.spendReq(fresh, credit("bob", 3))); err != nil || !resp.Replayed {
		t.Fatalf("new token after retirement = %+v, %v; want its replay", resp, err)
	}
	if got := e.balance("bob"); got != 5 {
		t.Fatalf("balance = %d, want 5", got)
	}
}

func TestSpenderNeedsKeys(t *testing.T) {
	if _, err := consume.New(consume.Config{Handlers: consume.NewRegistry()}); err == nil {
		t.Fatal("consume.New accepted a Config without Keys")
	}
}
