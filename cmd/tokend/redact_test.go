package main

import (
	"encoding/json"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/logredact"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// TestServeRedactsSecrets: the process's log, whatever writes to it, shows
// no API key or token secret a client put in its URL or headers, and a
// secret in the URL is counted on /metrics and reported at WARN.
func TestServeRedactsSecrets(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := apikey.Create(t.Context(), conn, "acme", apikey.Client)
	conn.Close(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(proctest.Binary(t), "serve", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"TOKEND_DATABASE_URL=" + dbURL, "TOKEND_SECRET_KEY=" + strings.Repeat("k", 40), "TOKEND_ALLOW_SUPERUSER=1"}
	srv := startServe(t, cmd)
	base := srv.base
	auth := http.Header{"Authorization": {"Bearer " + key}}

	_, body := httpDo(t, "POST", base+"/v1/tokens", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`,
		http.Header{"Authorization": {"Bearer " + key}, "Idempotency-Key": {"i-1"}})
	var issued struct{ ID, Token string }
	if err := json.Unmarshal([]byte(body), &issued); err != nil || issued.Token == "" {
		t.Fatalf("issue: %s", body)
	}
	httpDo(t, "GET", base+"/v1/tokens/"+issued.Token, "", auth)
	httpDo(t, "GET", base+"/v1/tokens/"+issued.ID+"?token="+issued.Token+"&key="+key, "", auth)
	httpDo(t, "GET", base+"/healthz", "", http.Header{"X-Token": {issued.Token}, "Referer": {"https://x.example/?k=" + key}})
	httpDo(t, "GET", base+"/v1/tokens/"+issued.ID, "", http.Header{"Authorization": {"Token " + key}})
	_, scrape := httpDo(t, "GET", base+"/metrics", "", nil)

	logs, err := srv.stop()
	if err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs)
	}
	out := logs
	for _, s := range []string{key, issued.Token} {
		if strings.Contains(out, s[4:]) || strings.Contains(scrape, s[4:]) {
			t.Errorf("the log or /metrics holds a secret:\n%s", out)
		}
	}
	if !strings.Contains(out, logredact.Marker) {
		t.Errorf("no %s in the log:\n%s", logredact.Marker, out)
	}
	if n := strings.Count(out, `"level":"WARN","msg":"secret in URL"`); n != 2 {
		t.Errorf("%d secret-in-URL warnings, want 2 (a path, a query):\n%s", n, out)
	}
	for _, series := range []string{`tokend_secret_in_url_total{part="path"} 1`, `tokend_secret_in_url_total{part="query"} 1`} {
		if !strings.Contains(scrape, series+"\n") {
			t.Errorf("/metrics has no %s", series)
		}
	}
}
