package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealth: tokend health exits 0 when /readyz answers 200 and 1 when it
// answers otherwise or nothing listens, asking loopback for 0.0.0.0.
func TestHealth(t *testing.T) {
	t.Parallel()
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()

	for _, tc := range []struct {
		name   string
		listen string
		status int
		want   int
	}{
		{"ready", "0.0.0.0:" + port, http.StatusOK, 0},
		{"not ready", "127.0.0.1:" + port, http.StatusServiceUnavailable, 1},
		{"nothing listening", closedAddr, http.StatusOK, 1},
	} {
		status.Store(int64(tc.status))
		var stderr bytes.Buffer
		env := map[string]string{"TOKEND_LISTEN": tc.listen}
		if got := run(t.Context(), []string{"health"}, func(k string) string { return env[k] }, &bytes.Buffer{}, &stderr); got != tc.want {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, got, tc.want, stderr.String())
		}
	}
}
