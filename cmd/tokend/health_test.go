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

// TestHealth: tokend health exits 0 when /healthz (liveness) answers 200,
// and with --ready when /readyz does, and 1 when it answers otherwise or
// nothing listens, asking loopback for 0.0.0.0. Liveness does not follow
// readiness: an instance whose database is down is not ready, and alive.
func TestHealth(t *testing.T) {
	t.Parallel()
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.WriteHeader(http.StatusOK)
		case "/readyz":
			w.WriteHeader(int(status.Load()))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()

	for _, tc := range []struct {
		name   string
		args   []string
		listen string
		status int // /readyz's
		want   int
	}{
		{"alive and ready", nil, "0.0.0.0:" + port, http.StatusOK, 0},
		{"alive, not ready", nil, "127.0.0.1:" + port, http.StatusServiceUnavailable, 0},
		{"ready", []string{"--ready"}, "0.0.0.0:" + port, http.StatusOK, 0},
		{"not ready", []string{"--ready"}, "127.0.0.1:" + port, http.StatusServiceUnavailable, 1},
		{"nothing listening", nil, closedAddr, http.StatusOK, 1},
		{"nothing listening, ready?", []string{"--ready"}, closedAddr, http.StatusOK, 1},
	} {
		status.Store(int64(tc.status))
		var stderr bytes.Buffer
		env := map[string]string{"TOKEND_LISTEN": tc.listen}
		if got := run(t.Context(), append([]string{"health"}, tc.args...), func(k string) string { return env[k] }, &bytes.Buffer{}, &stderr); got != tc.want {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, got, tc.want, stderr.String())
		}
	}
}
