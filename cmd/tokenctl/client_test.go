package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestUnreachable: when tokend gives no answer, tokenctl says so in one
// sentence that names the address and what to check, not with Go's error,
// after one line saying that it retries.
// Every address is on loopback; a name that does not resolve is not tried,
// as that would ask a resolver off this machine.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hangup.Close() })
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	down := closedURL(t)
	tests := []struct {
		name, url, want string
	}{
		{"refused", down, "cannot reach tokend at " + down + ": nothing listens there (connection refused); is tokend running"},
		{"https to plain http", strings.Replace(plain.URL, "http://", "https://", 1), "it does not speak TLS there; use http://"},
		{"untrusted certificate", untrusted.URL, "cannot reach tokend at " + untrusted.URL + ": its TLS certificate is not trusted"},
		{"closed without an answer", "http://" + hangup.Addr().String(), "the connection was closed before an answer came"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			env := map[string]string{"TOKENCTL_URL": tt.url, "TOKENCTL_KEY": "tkk_x"}
			code := run(context.Background(), []string{"stats"}, func(k string) string { return env[k] }, &stdout, &stderr)
			got := stderr.String()
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			if code != exitError || !strings.Contains(lines[len(lines)-1], tt.want) || len(lines) != 2 || !strings.Contains(lines[0], "retrying") ||
				strings.Contains(got, "dial tcp") || strings.Contains(got, `Get "`) {
				t.Errorf("exit %d, stderr %q; want %d, a line saying it retries, then one with %q", code, got, exitError, tt.want)
			}
		})
	}
}
