package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// A running tokend sweeps on its own: a finished token whose retention has
// passed goes, with its events, while tokens still owed an outcome stay
// however old they are, and so does a finished token still remembered.
func TestServeSweeps(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: []string{"TOKEND_SWEEP_INTERVAL=200ms"}})
	client := proctest.CreateKey(t, dbURL, "acme", "client")
	operator := proctest.CreateKey(t, dbURL, "acme", "operator")
	if status, body := call(t, srv.URL, operator, http.MethodPut, "/v1/admin/operations/pay.card", `{"mode":"lease","lease_seconds":600}`); status != http.StatusOK {
		t.Fatalf("declare pay.card: %d %s", status, body)
	}

	// spend issues a token of op and spends it, and returns the token's id
	// and the spend's answer.
	spend := func(intentID, op, payload string) (id string, status int, body []byte) {
		t.Helper()
		status, body = call(t, srv.URL, client, http.MethodPost, "/v1/tokens",
			fmt.Sprintf(`{"operation":%q,"subject":"alice","ttl_seconds":600,"payload":%s}`, op, payload), "Idempotency-Key", intentID)
		var issued struct{ ID, Token string }
		if status != http.StatusCreated || json.Unmarshal(body, &issued) != nil {
			t.Fatalf("issue: %d %s", status, body)
		}
		status, body = call(t, srv.URL, client, http.MethodPost, "/v1/tokens/consume",
			fmt.Sprintf(`{"token":%q,"operation":%q,"subject":"alice","payload":%s}`, issued.Token, op, payload))
		return issued.ID, status, body
	}
	credit := `{"account":"alice","amount":1}`
	due, _, _ := spend("i-due", "ledger.credit", credit)
	kept, _, _ := spend("i-kept", "ledger.credit", credit)
	pending, _, _ := spend("i-pending", "pay.card", "null")
	unknown, status, body := spend("i-unknown", "pay.card", "null")
	var lease struct{ Generation int64 }
	if status != http.StatusAccepted || json.Unmarshal(body, &lease) != nil {
		t.Fatalf("lease spend: %d %s", status, body)
	}
	if status, body := call(t, srv.URL, client, http.MethodPost, "/v1/tokens/"+unknown+"/unknown", fmt.Sprintf(`{"generation":%d}`, lease.Generation)); status != http.StatusOK {
		t.Fatalf("report unknown: %d %s", status, body)
	}

	ctx := t.Context()
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	state := func(id string) (s string) {
		t.Helper()
		err := db.QueryRow(ctx, `SELECT coalesce((SELECT state FROM tokens WHERE id = $1), 'purged')`, id).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// One statement, so the sweep that deletes due sees the others aged too.
	if _, err := db.Exec(ctx, `UPDATE tokens SET expires_at = now() - interval '2 days', retain_until = now() - interval '1 day' WHERE id = ANY($1)`,
		[]string{due, pending, unknown}); err != nil {
		t.Fatal(err)
	}

	// Only a guard against a sweeper that never runs: sweeps come every 200ms.
	guard := time.Now().Add(time.Minute)
	// The log line comes after the sweep's last batch: waiting for it too
	// keeps SIGTERM from landing between the delete and its report.
	for state(due) != "purged" || !strings.Contains(srv.Logs(), `"msg":"admin: swept"`) {
		if time.Now().After(guard) {
			t.Fatalf("the sweeper has not purged %s after a minute; tokend logs:\n%s", due, srv.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The purged token's events stay for the feed, the last one saying so.
	var last string
	if err := db.QueryRow(ctx, `SELECT kind FROM token_events WHERE token_id = $1 ORDER BY seq DESC LIMIT 1`, due).Scan(&last); err != nil || last != "purged" {
		t.Errorf("the purged token's last event is %q (%v), want purged", last, err)
	}
	for id, want := range map[string]string{kept: "consumed", pending: "pending", unknown: "unknown"} {
		if got := state(id); got != want {
			t.Errorf("token %s is %s after the sweep, want %s", id, got, want)
		}
	}

	// The sweeper stops with the server, before the database pool closes.
	if err := srv.Stop(); err != nil {
		t.Fatalf("tokend after SIGTERM: %v\n%s", err, srv.Logs())
	}
	logs := srv.Logs()
	if !strings.Contains(logs, `"msg":"admin: swept","lapsed":0,"expired":0,"purged":1`) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("want one token purged, nothing lapsed or expired, and a clean stop in the log:\n%s", logs)
	}
}
