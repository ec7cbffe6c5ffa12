package form_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/token"
)

// Config.Changed hears of each submit that moved a token, once, before the
// submit is answered: a cache in front of the tokens can then drop its copy
// before anyone reads the new state. Replays move nothing and are not told.
func TestChangedHearsCommittedSubmits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu    sync.Mutex
		heard []consume.Response
	)
	p, err := form.New(form.Config{Pool: e.pool, Issuer: e.issuer, Spender: e.spender, Tenant: tenant,
		Operation: ledger.Credit, Payload: creditPayload,
		Changed: func(_ context.Context, tn string, r consume.Response) {
			if tn != tenant {
				t.Errorf("Changed for tenant %q, want %q", tn, tenant)
			}
			mu.Lock()
			heard = append(heard, r)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	f := issue(t, p, "alice")
	for i := range 3 {
		res, err := p.Spend(post(t, f, "account", "acc_1", "amount", "5"), "alice")
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		mu.Lock()
		n := len(heard)
		mu.Unlock()
		if n != 1 {
			t.Fatalf("after submit %d (replayed %v): Changed heard %d times, want 1", i, res.Replayed, n)
		}
	}
	if r := heard[0]; r.TokenID != f.TokenID || r.State != token.Consumed {
		t.Errorf("Changed heard %+v, want %s consumed", r, f.TokenID)
	}
}
