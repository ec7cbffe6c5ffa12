package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// tokend serve with OTEL_EXPORTER_OTLP_ENDPOINT set exports its spans to
// that collector over OTLP/HTTP: a spend sent with a caller's traceparent
// is there under the caller's trace id, with the service name the
// variables give, flushed on SIGTERM (the batch's delay is longer than the
// test); no API key or token secret is in what was sent.
func TestServeExportsTracesWhenAsked(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		posted bytes.Buffer
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			posted.Write(b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	}))
	defer collector.Close()

	dbURL := ledgertest.NewURL(t)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, key, err := apikey.Create(t.Context(), conn, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(proctest.Binary(t), "serve", "--listen", "127.0.0.1:0")
	cmd.Env = []string{
		"TOKEND_DATABASE_URL=" + dbURL,
		"TOKEND_SECRET_KEY=" + strings.Repeat("k", 40),
		"TOKEND_ALLOW_SUPERUSER=1",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL,
		"OTEL_SERVICE_NAME=tokend-traced",
	}
	srv := startServe(t, cmd)
	base := srv.base

	const traceID = "5bf92f3577b34da6a3ce929d0e0e4736"
	res, body := httpDo(t, "POST", base+"/v1/tokens", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`,
		http.Header{"Authorization": {"Bearer " + key}, "Idempotency-Key": {"i-1"}})
	var issued struct{ Token string }
	if err := json.Unmarshal([]byte(body), &issued); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("issue = %d %s", res.StatusCode, body)
	}
	res, body = httpDo(t, "POST", base+"/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"u","payload":{"account":"a","amount":3}}`, issued.Token),
		http.Header{"Authorization": {"Bearer " + key}, "Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("consume = %d %s", res.StatusCode, body)
	}
	logs, err := srv.stop()
	if err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs)
	}
	mu.Lock()
	sent := posted.Bytes()
	mu.Unlock()
	id, _ := hex.DecodeString(traceID)
	for _, want := range [][]byte{[]byte("POST /v1/tokens/consume"), []byte("tokend-traced"), []byte("postgresql"), id} {
		if !bytes.Contains(sent, want) {
			t.Errorf("the collector received no %q (%d bytes)\n%s", want, len(sent), logs)
		}
	}
	for _, secret := range []string{key, issued.Token} {
		if bytes.Contains(sent, []byte(secret)) {
			t.Error("the exported spans hold a key or a token secret")
		}
	}
	if !strings.Contains(logs, `"msg":"tracing on"`) {
		t.Errorf("no line says tracing is on:\n%s", logs)
	}
}
