package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// TestServeRefusesASuperuser: serve connected as a superuser exits at
// start with one line naming TOKEND_ALLOW_SUPERUSER, and with it set it
// starts.
func TestServeRefusesASuperuser(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	env := map[string]string{"TOKEND_DATABASE_URL": dbURL, "TOKEND_SECRET_KEY": strings.Repeat("k", 32), "TOKEND_LISTEN": "127.0.0.1:0"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if code == 0 || ctx.Err() != nil || !strings.HasPrefix(last, "tokend: ") || !strings.Contains(last, "TOKEND_ALLOW_SUPERUSER=1") || !strings.Contains(last, "superuser") {
		t.Fatalf("serve as a superuser: exit %d, stderr %q; want a refusal naming TOKEND_ALLOW_SUPERUSER", code, stderr.String())
	}
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL}) // proctest sets TOKEND_ALLOW_SUPERUSER=1
	if !strings.Contains(srv.Logs(), "serving as a superuser") {
		t.Errorf("serve allowed as a superuser does not say so: %s", srv.Logs())
	}
}

// TestRuntimeRoleServes: serve runs as a role with only the grants
// docs/operations.md gives the runtime role (its runtime-grants block, run
// as written), on a schema another role migrated: it starts, issues,
// spends and reads the feed, and logs no ERROR.
func TestRuntimeRoleServes(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		// docs/operations.md says why: the workers' sequences.
		t.Skip("the runtime role's grants are for a single Postgres; on Citus the workers' event sequence needs its own")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- runtime-grants[^>]*-->\n```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no runtime-grants sql block")
	}
	dbURL := ledgertest.NewURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "tokend_rt_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Exec(ctx, "DROP ROLE "+role)
		admin.Close(ctx)
	})
	// pgtest's schema is owned by the role that made it: it stands for
	// tokend_owner.
	var owner string
	if err := admin.QueryRow(t.Context(), "SELECT current_user::text").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	grants := strings.NewReplacer("tokend_runtime", role, "tokend_owner", owner).Replace(string(m[1]))
	if _, err := admin.Exec(t.Context(), "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(t.Context(), grants); err != nil {
		t.Fatalf("the doc's grants: %v", err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	rtURL := u.String()
	srv := proctest.Start(t, proctest.Options{DatabaseURL: rtURL})
	key := proctest.CreateKey(t, dbURL, "acme", "client")

	payload := `{"account":"alice","amount":5}`
	status, body := call(t, srv.URL, key, http.MethodPost, "/v1/tokens",
		`{"operation":"ledger.credit","subject":"alice","ttl_seconds":600,"payload":`+payload+`}`, "Idempotency-Key", "rt-1")
	if status != http.StatusCreated {
		t.Fatalf("issue as the runtime role: %d %s", status, body)
	}
	token := regexp.MustCompile(`"token":"([^"]+)"`).FindSubmatch(body)
	if token == nil {
		t.Fatalf("no token in %s", body)
	}
	status, body = call(t, srv.URL, key, http.MethodPost, "/v1/tokens/consume",
		`{"token":"`+string(token[1])+`","operation":"ledger.credit","subject":"alice","payload":`+payload+`}`)
	if status != http.StatusOK {
		t.Fatalf("spend as the runtime role: %d %s", status, body)
	}
	status, body = call(t, srv.URL, key, http.MethodGet, "/v1/events?limit=10", "")
	if status != http.StatusOK {
		t.Fatalf("feed as the runtime role: %d %s", status, body)
	}
	if strings.Contains(srv.Logs(), `"level":"ERROR"`) || strings.Contains(srv.Logs(), "serving as a superuser") {
		t.Fatalf("serve as the runtime role logged an ERROR or ran as a superuser:\n%s", srv.Logs())
	}
}
