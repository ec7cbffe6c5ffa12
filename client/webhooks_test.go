package client_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokend/tokend/client"
)

// TestWebhookWritesKeepOneIdempotencyKey: CreateWebhook and
// RotateWebhookSecret send an Idempotency-Key, the same on every retry of
// one call (so the server answers a retry with the first write), a new one
// per call, the caller's when given; it is never in the body.
func TestWebhookWritesKeepOneIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if strings.Contains(strings.ToLower(string(body)), "idempotency") {
			t.Errorf("the key is in the body: %s", body)
		}
		if attempts++; attempts%2 == 1 { // every call's first attempt: busy
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":503,"code":"unavailable"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		io.WriteString(w, `{"id":"whe_1","url":"https://example.com","event_types":[],"enabled":true,"secret":"whsec_x"}`)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "tkd_test", client.WithRetry(client.Retry{Attempts: 3, Base: time.Millisecond, Max: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: "https://example.com"})
	if err != nil || !w.Replayed || w.Secret != "whsec_x" {
		t.Fatalf("create: %+v %v", w, err)
	}
	if _, err := c.RotateWebhookSecret(ctx, "whe_1", client.SecretRotation{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RotateWebhookSecret(ctx, "whe_1", client.SecretRotation{IdempotencyKey: "mine"}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 6 || keys[0] == "" || keys[0] != keys[1] || keys[2] == "" || keys[2] != keys[3] || keys[0] == keys[2] || keys[4] != "mine" || keys[5] != "mine" {
		t.Fatalf("keys sent: %q; want one per call, kept across its retry", keys)
	}
}
