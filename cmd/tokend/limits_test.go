package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/internal/proctest"
)

// The server refuses oversized headers before any handler runs, and a
// normal request on the same server still works.
func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	srv := proctest.Start(t, proctest.Options{DatabaseURL: pgtest.NewURL(t)})
	addr := strings.TrimPrefix(srv.URL, "http://")

	status := func(extra int) int {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: %s\r\nConnection: close\r\n\r\n", strings.Repeat("a", extra))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(1 << 10); got != http.StatusOK {
		t.Fatalf("1 KiB of headers: %d, want 200", got)
	}
	if got := status(256 << 10); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("256 KiB of headers: %d, want 431", got)
	}
}
