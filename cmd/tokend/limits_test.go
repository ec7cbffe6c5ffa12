package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// The server refuses oversized headers, and a path too long, before any
// handler runs, and a normal request on the same server still works. Every
// refusal, net/http's own included, is problem+json with a code.
func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	srv := proctest.Start(t, proctest.Options{DatabaseURL: ledgertest.NewURL(t)})
	addr := strings.TrimPrefix(srv.URL, "http://")

	send := func(raw string) (int, string, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var p struct {
			Code   string `json:"code"`
			Status int    `json:"status"`
		}
		if resp.StatusCode >= 400 {
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(body, &p) != nil || p.Status != resp.StatusCode {
				t.Errorf("%d answer: Content-Type %q, body %q; want a problem+json of that status", resp.StatusCode, ct, body)
			}
		}
		return resp.StatusCode, p.Code, string(body)
	}
	headers := func(extra int) string {
		return fmt.Sprintf("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: %s\r\nConnection: close\r\n\r\n", strings.Repeat("a", extra))
	}
	if got, _, body := send(headers(1 << 10)); got != http.StatusOK {
		t.Fatalf("1 KiB of headers: %d %s, want 200", got, body)
	}
	tests := []struct {
		name, raw string
		status    int
		code      string
	}{
		{"256 KiB of headers", headers(256 << 10), http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"},
		{"a 64 KiB path", "GET /v1/tokens/" + strings.Repeat("x", 64<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"},
		{"a 64 KiB query", "GET /v1/events?after=" + strings.Repeat("1", 64<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"},
		{"a header line without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n", http.StatusBadRequest, "invalid_request"},
		{"two Host headers", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", http.StatusBadRequest, "invalid_request"},
	}
	for _, tt := range tests {
		if got, code, body := send(tt.raw); got != tt.status || code != tt.code {
			t.Errorf("%s: %d %s (%.200s), want %d %s", tt.name, got, code, body, tt.status, tt.code)
		}
	}
	if got, _, body := send(headers(10)); got != http.StatusOK {
		t.Fatalf("after the refusals: %d %s, want 200", got, body)
	}
}
