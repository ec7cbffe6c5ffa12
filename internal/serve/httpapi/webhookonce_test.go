package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/webhookapi"
	"github.com/tokend/tokend/token"
)

// TestWebhookWritesAreIdempotent: a create or rotate-secret sent again with
// the same Idempotency-Key (a retry, a double click) answers the first
// answer byte for byte, secret included, with Idempotent-Replayed: true,
// and writes nothing more: one endpoint, one rotation. Sent at once, the
// same holds. The same key with another request is 422
// idempotency_key_reused; keys are the tenant's own.
func TestWebhookWritesAreIdempotent(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("w", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{AllowedHosts: []string{"127.0.0.1"}}))
	})
	op, other := a.operator(), a.key("globex", "operator")
	send := func(key, path, idem, body string) response {
		return a.do(request{method: http.MethodPost, path: path, key: key, body: body, header: http.Header{"Idempotency-Key": {idem}}})
	}
	create := `{"url":"http://127.0.0.1:9/hook","event_types":["issued"]}`

	var wg sync.WaitGroup
	res := make([]response, 4)
	for i := range res {
		wg.Go(func() { res[i] = send(op, "/v1/admin/webhooks", "create-1", create) })
	}
	wg.Wait()
	replays := 0
	for i, r := range res {
		if r.status != http.StatusCreated || !bytes.Equal(r.body, res[0].body) {
			t.Fatalf("create %d = %d %s; want 201 %s", i, r.status, r.body, res[0].body)
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	if replays != len(res)-1 || a.count("webhook_endpoints") != 1 {
		t.Fatalf("%d replays, %d endpoints: want %d and 1", replays, a.count("webhook_endpoints"), len(res)-1)
	}
	var w struct{ ID, Secret string }
	loose(t, res[0].body, &w)

	wantProblem(t, send(op, "/v1/admin/webhooks", "create-1", `{"url":"http://127.0.0.1:9/other"}`), http.StatusUnprocessableEntity, "idempotency_key_reused")
	if r := send(other, "/v1/admin/webhooks", "create-1", create); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("another tenant's create with the same key = %d %v: want a new 201", r.status, r.header)
	}
	if n := a.count("webhook_endpoints"); n != 2 {
		t.Fatalf("%d endpoints, want 2", n)
	}

	rotate := "/v1/admin/webhooks/" + w.ID + "/rotate-secret"
	first := send(op, rotate, "rotate-1", `{"overlap_seconds":60}`)
	again := send(op, rotate, "rotate-1", `{"overlap_seconds":60}`)
	var r1, r2 struct{ Secret string }
	loose(t, first.body, &r1)
	loose(t, again.body, &r2)
	if first.status != http.StatusOK || !bytes.Equal(first.body, again.body) || again.header.Get("Idempotent-Replayed") != "true" || r1.Secret == w.Secret {
		t.Fatalf("rotate twice = %d %s, %d %s %v", first.status, first.body, again.status, again.body, again.header)
	}
	var rotated int
	if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoints WHERE id = $1 AND prev_secret_nonce IS NOT NULL`, w.ID).Scan(&rotated); err != nil || rotated != 1 {
		t.Fatalf("rotated: %d %v", rotated, err)
	}
	// The replay is the first rotation's answer: a third rotation under a
	// new key gives a new secret, and the old key still replays the first.
	third := send(op, rotate, "rotate-2", `{"overlap_seconds":60}`)
	var r3 struct{ Secret string }
	loose(t, third.body, &r3)
	if r3.Secret == r1.Secret || !bytes.Equal(send(op, rotate, "rotate-1", `{"overlap_seconds":60}`).body, first.body) {
		t.Fatalf("a new key must rotate again and the old key replay the first answer")
	}
	wantProblem(t, send(op, rotate, "rotate-1", `{"overlap_seconds":61}`), http.StatusUnprocessableEntity, "idempotency_key_reused")
	wantProblem(t, send(op, rotate, "create-1", ``), http.StatusUnprocessableEntity, "idempotency_key_reused")
	wantProblem(t, send(op, "/v1/admin/webhooks", strings.Repeat("k", 256), create), http.StatusBadRequest, "invalid_request")
	if strings.Contains(string(first.body), `\u003c`) {
		t.Fatal("HTML-escaped")
	}
}
