package faults

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
)

// effects is what the database holds of a tenant after a run: each token's
// state and its number of ledger entries, the entries in all, and the sum of
// the balances of its accounts.
type effects struct {
	tokens  map[string]tokenEffect // by token id
	entries int
	balance int64
}

type tokenEffect struct {
	state   string
	entries int
}

func readEffects(ctx context.Context, t testing.TB, dbURL, tenant string) effects {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to read effects: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	rows, err := conn.Query(ctx, `
		SELECT t.id, t.state, count(e.token_id)
		FROM tokens t
		LEFT JOIN ledger_entries e ON e.tenant_id = t.tenant_id AND e.token_id = t.id
		WHERE t.tenant_id = $1
		GROUP BY t.id, t.state`, tenant)
	if err != nil {
		t.Fatalf("read tokens: %v", err)
	}
	e := effects{tokens: map[string]tokenEffect{}}
	for rows.Next() {
		var (
			id string
			te tokenEffect
		)
		if err := rows.Scan(&id, &te.state, &te.entries); err != nil {
			t.Fatalf("read tokens: %v", err)
		}
		e.tokens[id] = te
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read tokens: %v", err)
	}
	err = conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM ledger_entries WHERE tenant_id = $1),
		       (SELECT coalesce(sum(balance), 0) FROM ledger_accounts WHERE tenant_id = $1)`,
		tenant).Scan(&e.entries, &e.balance)
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	return e
}

// checkExactlyOnce compares the database with what each token's client was
// finally told (told, by token id), for a run that credited amount per
// token: a token is consumed exactly when its client got a 200, a consumed
// token moved the ledger exactly once and any other not at all, and the
// balances add up to the consumed tokens' credits. It returns the number of
// consumed tokens.
func checkExactlyOnce(ctx context.Context, t testing.TB, dbURL, tenant string, amount int64, told map[string]response) int {
	t.Helper()
	e := readEffects(ctx, t, dbURL, tenant)
	consumed := 0
	for id, te := range e.tokens {
		r, known := told[id]
		switch {
		case !known && te.state != "issued":
			t.Errorf("token %s is %s with %d ledger entries, but no client was told about it", id, te.state, te.entries)
		case known && (te.state == "consumed") != (r.status == http.StatusOK):
			t.Errorf("token %s is %s, but its client was finally told %s", id, te.state, r)
		}
		want := 0
		if te.state == "consumed" {
			consumed++
			want = 1
		}
		if te.entries != want {
			t.Errorf("token %s is %s with %d ledger entries, want %d", id, te.state, te.entries, want)
		}
	}
	for id, r := range told {
		if _, ok := e.tokens[id]; !ok {
			t.Errorf("token %s, told %s, is not in the database", id, r)
		}
	}
	if e.entries != consumed || e.balance != int64(consumed)*amount {
		t.Errorf("ledger: %d entries, balances %d; want %d and %d for %d consumed tokens",
			e.entries, e.balance, consumed, int64(consumed)*amount, consumed)
	}
	t.Logf("database: %d tokens, %d consumed, %d ledger entries, balances sum to %d", len(e.tokens), consumed, e.entries, e.balance)
	return consumed
}
