package inspect_test

import (
	"slices"
	"testing"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/token"
)

// An issued token past its expiry, by the database clock, reads as expired
// through every read of this package, before the sweeper records it and
// after, and the record reads the same both times.
func TestExpiredIsAState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	late := e.issue(t, "acme", ledger.Credit, "alice", "").Token.ID
	live := e.issue(t, "acme", ledger.Credit, "alice", "").Token.ID
	// Past expiry by the database's now(); the process clock plays no part.
	if _, err := e.pool.Exec(ctx, `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}

	lists := []struct {
		name string
		f    inspect.Filter
		want []string
	}{
		{"state expired", inspect.Filter{State: token.Expired}, []string{late}},
		{"state issued", inspect.Filter{State: token.Issued}, []string{live}},
		{"state expired, subject", inspect.Filter{State: token.Expired, Subject: "alice"}, []string{late}},
		{"state issued, operation", inspect.Filter{State: token.Issued, Operation: ledger.Credit}, []string{live}},
		{"state consumed", inspect.Filter{State: token.Consumed}, nil},
	}
	check := func(when string) token.Record {
		t.Helper()
		got, err := inspect.Get(ctx, e.pool, "acme", late)
		if err != nil {
			t.Fatalf("%s: Get: %v", when, err)
		}
		if got.State != token.Expired || got.FinishedAt == nil || !got.FinishedAt.Equal(got.ExpiresAt) {
			t.Errorf("%s: Get = state %s, finished %v; want expired, finished at its expiry %v", when, got.State, got.FinishedAt, got.ExpiresAt)
		}
		if r, err := inspect.Get(ctx, e.pool, "acme", live); err != nil || r.State != token.Issued || r.FinishedAt != nil {
			t.Errorf("%s: Get(live) = %s, finished %v, %v; want issued, unfinished", when, r.State, r.FinishedAt, err)
		}
		for _, tt := range lists {
			items, _, err := inspect.List(ctx, e.pool, "acme", tt.f)
			if err != nil {
				t.Fatalf("%s: %s: List: %v", when, tt.name, err)
			}
			var ids []string
			for _, r := range items {
				ids = append(ids, r.ID)
				if r.ID == late && r.State != token.Expired {
					t.Errorf("%s: %s: listed as %s", when, tt.name, r.State)
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("%s: %s: List = %v, want %v", when, tt.name, ids, tt.want)
			}
		}
		return got
	}

	before := check("before the sweep")
	if _, err := admin.Purge(ctx, e.pool, admin.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := e.pool.QueryRow(ctx, `SELECT state FROM tokens WHERE id = $1`, late).Scan(&stored); err != nil || stored != "expired" {
		t.Fatalf("after the sweep the row is %q, %v; want it recorded expired", stored, err)
	}
	after := check("after the sweep")
	if before.State != after.State || !before.FinishedAt.Equal(*after.FinishedAt) || before.Generation != after.Generation {
		t.Errorf("the record changed with the sweep: %+v, then %+v", before, after)
	}
}
