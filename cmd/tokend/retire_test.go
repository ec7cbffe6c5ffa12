package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/token"
)

// TestServeRotateThenRetire is the documented procedure, end to end: tokens
// issued under key A; a restart with B current and A previous (rotation)
// still re-issues and spends them; a restart with B alone (retirement)
// refuses their spend with 410 token_key_retired and the re-issue of their
// intent with 410 intent_key_retired, changes nothing, counts and logs each
// refusal, and serves new intents.
func TestServeRotateThenRetire(t *testing.T) {
	t.Parallel()
	const keyB = "rotated-server-key-after-a-leak-0123456789"
	dbURL := ledgertest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL}) // key A: proctest.SecretKey
	key := proctest.CreateKey(t, dbURL, "acme", "client")

	issue := func(intentID string, amount int) (int, []byte) {
		return call(t, srv.URL, key, http.MethodPost, "/v1/tokens",
			fmt.Sprintf(`{"operation":"ledger.credit","subject":"alice","ttl_seconds":600,"payload":{"account":"alice","amount":%d}}`, amount),
			"Idempotency-Key", intentID)
	}
	spend := func(secret string, amount int, reqID string) (int, []byte) {
		return call(t, srv.URL, key, http.MethodPost, "/v1/tokens/consume",
			fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"alice","payload":{"account":"alice","amount":%d}}`, secret, amount),
			"X-Request-Id", reqID)
	}
	type issued struct{ ID, Token string }
	mustIssue := func(intentID string, amount int) issued {
		status, body := issue(intentID, amount)
		if status != http.StatusCreated {
			t.Fatalf("issue %s: %d %s", intentID, status, body)
		}
		var out issued
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	underA := mustIssue("under-a", 1)
	spentUnderA := mustIssue("spent-under-a", 2)
	if status, body := spend(spentUnderA.Token, 2, "spend-a"); status != http.StatusOK {
		t.Fatalf("spend under A: %d %s", status, body)
	}
	rotatedA := mustIssue("rotated-a", 4)

	// Rotate: B current, A previous.
	srv.Stop()
	srv = proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: []string{
		"TOKEND_SECRET_KEY=" + keyB, "TOKEND_PREVIOUS_SECRET_KEYS=" + proctest.SecretKey}})
	if again := mustIssue("under-a", 1); again != underA {
		t.Fatalf("re-issue after rotation = %+v, want %+v", again, underA)
	}
	if status, body := spend(rotatedA.Token, 4, "spend-rotated"); status != http.StatusOK {
		t.Fatalf("spend of an A token after rotation: %d %s", status, body)
	}
	underB := mustIssue("under-b", 8)

	// Retire A: B alone.
	srv.Stop()
	srv = proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: []string{"TOKEND_SECRET_KEY=" + keyB}})
	effects := func() string {
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var s string
		err = conn.QueryRow(context.Background(), `SELECT
			(SELECT coalesce(sum(amount), 0) FROM ledger_entries)::text || '/' ||
			(SELECT count(*) FROM token_events)::text || '/' ||
			(SELECT string_agg(id || ':' || state || ':' || generation, ',' ORDER BY id) FROM tokens)`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := effects()
	for _, tc := range []struct {
		reqID  string
		secret string
		amount int
	}{{"retired-1", underA.Token, 1}, {"retired-2", spentUnderA.Token, 2}, {"retired-3", underA.Token, 1}} {
		status, body := spend(tc.secret, tc.amount, tc.reqID)
		if status != http.StatusGone || !strings.Contains(string(body), `"code":"token_key_retired"`) {
			t.Fatalf("%s: spend of an A token after retirement: %d %s", tc.reqID, status, body)
		}
	}
	for range 2 {
		status, body := issue("under-a", 1)
		if status != http.StatusGone || !strings.Contains(string(body), `"code":"intent_key_retired"`) || !strings.Contains(string(body), underA.ID) {
			t.Fatalf("re-issue of an A intent after retirement: %d %s", status, body)
		}
	}
	if after := effects(); after != before {
		t.Fatalf("refusals changed ledger/events/tokens:\n%s\n%s", before, after)
	}
	if status, body := spend(underB.Token, 8, "spend-b"); status != http.StatusOK {
		t.Fatalf("spend of a B token after retirement: %d %s", status, body)
	}
	fresh := mustIssue("after-retirement", 16)
	if status, body := spend(fresh.Token, 16, "spend-fresh"); status != http.StatusOK {
		t.Fatalf("spend of a new token: %d %s", status, body)
	}

	status, scrape := call(t, srv.URL, "", http.MethodGet, "/metrics", "")
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	for _, want := range []string{`tokend_retired_key_refusals_total{action="spend"} 3`, `tokend_retired_key_refusals_total{action="issue"} 2`} {
		if !strings.Contains(string(scrape), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := srv.Logs()
	for _, reqID := range []string{"retired-1", "retired-2", "retired-3"} {
		if !hasWarn(logs, reqID, token.KeyID(proctest.SecretKey)) {
			t.Errorf("no WARN line for %s naming the retired key id:\n%s", reqID, logs)
		}
	}
	for _, secret := range []string{underA.Token, spentUnderA.Token, underB.Token, fresh.Token} {
		if strings.Contains(logs, secret) {
			t.Fatal("a token secret reached the log")
		}
	}
}

// hasWarn reports whether logs hold a WARN line for request reqID naming
// the server key keyID.
func hasWarn(logs, reqID, keyID string) bool {
	for line := range strings.Lines(logs) {
		var l struct {
			Level       string `json:"level"`
			RequestID   string `json:"request_id"`
			ServerKeyID string `json:"server_key_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "WARN" && l.RequestID == reqID && l.ServerKeyID == keyID {
			return true
		}
	}
	return false
}
