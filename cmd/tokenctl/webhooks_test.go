package main

import (
	"regexp"
	"strings"
	"testing"

	webhooks "github.com/tokend/tokend/internal/infra/dispatch"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.ok("webhooks", "create", "https://hooks.example/tokend", "--types", "spend,revoke")
	id := regexp.MustCompile(`(?m)^id +(whe_\w+)$`).FindStringSubmatch(r.stdout)
	if id == nil || !regexp.MustCompile(`(?m)^secret +whsec_\S+ +\(shown once`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^event_types +revoke,spend$`).MatchString(r.stdout) {
		t.Fatalf("webhooks create:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "list"); !strings.Contains(r.stdout, id[1]) || strings.Contains(r.stdout, "whsec_") {
		t.Errorf("webhooks list:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "disable", id[1]); !regexp.MustCompile(`(?m)^enabled +false$`).MatchString(r.stdout) {
		t.Errorf("webhooks disable:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "enable", id[1]); !regexp.MustCompile(`(?m)^enabled +true$`).MatchString(r.stdout) {
		t.Errorf("webhooks enable:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "redeliver", id[1], "--all"); r.stdout != "redelivered 0\n" {
		t.Errorf("webhooks redeliver: %q", r.stdout)
	}
	// get shows every delivery's attempts and since when the endpoint
	// fails, each attempt in one sentence that says its status once: as
	// attempts are recorded now (attempts 2 to 5), and as they were before
	// issue 47 ("answered 503" in the error: attempts 1 and 6).
	if _, err := f.db.Exec(t.Context(), `
		WITH d AS (INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, attempts) VALUES ('acme', $1, 7, 'evt_seven', 6)),
		     w AS (UPDATE webhook_endpoints SET failing_since = '2026-01-02T03:04:05Z' WHERE id = $1)
		INSERT INTO webhook_attempts (tenant_id, endpoint_id, pos, attempt, status, error, duration_ms)
		VALUES ('acme', $1, 7, 1, 503, 'answered 503', 12), ('acme', $1, 7, 2, 503, '', 3),
		       ('acme', $1, 7, 3, NULL, $2, 0), ('acme', $1, 7, 4, 429, 'the endpoint asked to wait (Retry-After): the next attempt is in 30s', 4),
		       ('acme', $1, 7, 5, NULL, 'no answer within 10s (TOKEND_WEBHOOK_TIMEOUT)', 10000), ('acme', $1, 7, 6, 503, 'answered 503, Retry-After 30s', 5)`,
		id[1], webhooks.AttemptNotAllowed); err != nil {
		t.Fatal(err)
	}
	r = f.ok("webhooks", "get", id[1])
	for _, want := range []string{`(?m)^failing_since +2026-01-02T03:04:05Z$`, `(?m)^delivery +7 evt_seven pending, 6 attempts`,
		`(?m)^  attempt +1 \S+ answered 503, 12 ms$`, `(?m)^  attempt +2 \S+ answered 503, 3 ms$`,
		`(?m)^  attempt +3 \S+ ` + regexp.QuoteMeta(webhooks.AttemptNotAllowed) + `, 0 ms$`,
		`(?m)^  attempt +4 \S+ answered 429: the endpoint asked to wait \(Retry-After\): the next attempt is in 30s, 4 ms$`,
		`(?m)^  attempt +5 \S+ no answer within 10s \(TOKEND_WEBHOOK_TIMEOUT\), 10000 ms$`,
		`(?m)^  attempt +6 \S+ answered 503: Retry-After 30s, 5 ms$`} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("webhooks get lacks %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "answered 503: answered") || strings.Contains(r.stdout, "no answer: no answer") {
		t.Errorf("webhooks get says a status twice:\n%s", r.stdout)
	}
	// stats shows the endpoint's backlog and since when it fails.
	if r := f.ok("webhooks", "stats"); !regexp.MustCompile(`(?m)^`+id[1]+` +true +2026-01-02T03:04:05Z +1 +0 `).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^all +- +1 failing +1 +0 `).MatchString(r.stdout) {
		t.Errorf("webhooks stats:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "redeliver", id[1], "--all"); r.stdout != "redelivered 1\n" {
		t.Errorf("webhooks redeliver --all hurries the pending delivery: %q", r.stdout)
	}
	// A rotation prints the new secret once, and when the old one stops signing.
	r = f.ok("webhooks", "rotate-secret", id[1], "--overlap", "1h")
	if !regexp.MustCompile(`(?m)^secret +whsec_\S+ +\(shown once`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^previous_secret_until +\S+`).MatchString(r.stdout) {
		t.Errorf("webhooks rotate-secret:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "get", id[1]); strings.Contains(r.stdout, "whsec_") {
		t.Errorf("webhooks get shows a secret:\n%s", r.stdout)
	}
	f.fails(exitUsage, "--overlap", "webhooks", "rotate-secret", id[1], "--overlap", "-1s")
	f.ok("webhooks", "delete", id[1])
	f.fails(exitNotFound, "not_found", "webhooks", "get", id[1])
	f.fails(exitError, "invalid_request", "webhooks", "create", "ftp://hooks.example/")
	f.fails(exitUsage, "webhooks: want", "webhooks")
}

// TestWebhookWritesRunTwiceWriteOnce: create and rotate-secret run again
// with the same --idempotency-key (a script re-run after a lost answer)
// print the same endpoint and secret, and register or rotate once.
func TestWebhookWritesRunTwiceWriteOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	secret := regexp.MustCompile(`(?m)^secret +(whsec_\S+)`)
	a := f.ok("webhooks", "create", "https://hooks.example/once", "--idempotency-key", "setup-1")
	b := f.ok("webhooks", "create", "https://hooks.example/once", "--idempotency-key", "setup-1")
	if a.stdout != b.stdout || secret.FindStringSubmatch(a.stdout) == nil {
		t.Fatalf("create twice:\n%s\n%s", a.stdout, b.stdout)
	}
	var n int
	if err := f.db.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoints WHERE url = 'https://hooks.example/once'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d endpoints, %v; want 1", n, err)
	}
	id := regexp.MustCompile(`(?m)^id +(whe_\w+)$`).FindStringSubmatch(a.stdout)[1]
	r1 := f.ok("webhooks", "rotate-secret", id, "--idempotency-key", "rotate-1")
	r2 := f.ok("webhooks", "rotate-secret", id, "--idempotency-key", "rotate-1")
	if secret.FindStringSubmatch(r1.stdout)[1] != secret.FindStringSubmatch(r2.stdout)[1] {
		t.Fatalf("rotate twice with one key gave two secrets:\n%s\n%s", r1.stdout, r2.stdout)
	}
	f.fails(exitError, "idempotency_key_reused", "webhooks", "create", "https://hooks.example/other", "--idempotency-key", "setup-1")
}
