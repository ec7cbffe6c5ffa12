package event_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
)

// TestStoredBodiesAreNotHTMLEscaped: an outcome body is encoded for storage
// at its own size, with <, > and & as they are; bodies stored escaped
// before the upgrade are rewritten to the same JSON value, unescaped, and an
// escaped backslash before "u003c" is left alone.
func TestStoredBodiesAreNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	result := map[string]string{"html": "<b>&amp;</b>", "literal": `\u003c stays`}
	b, err := consume.OutcomeBody{TokenID: "tok", State: "consumed", Result: result}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"token_id":"tok","state":"consumed","result":{"html":"<b>&amp;</b>","literal":"\\u003c stays"}}`
	if string(b) != want {
		t.Fatalf("Encode = %s, want %s", b, want)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, _ := pgtest.ConnAt(t, 8)
	escaped, err := json.Marshal(consume.OutcomeBody{TokenID: "tok", State: "consumed", Result: result})
	if err != nil {
		t.Fatal(err)
	}
	if string(escaped) == want {
		t.Fatal("json.Marshal no longer escapes: the test stores nothing escaped")
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
		VALUES ('t', 'tok', 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1, 200, $1)`, escaped); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Schema.Apply(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := conn.QueryRow(ctx, `SELECT outcome_body FROM token_events`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if string(stored) != want {
		t.Fatalf("after the upgrade the stored body is %s, want %s", stored, want)
	}
}
