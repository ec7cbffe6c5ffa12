package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokend/tokend/client"
)

// TestRetriesBoundedAndHonourRetryAfter checks which statuses are retried,
// that a proxy's non-problem answer is one too, and that a Retry-After
// longer than the caller's deadline ends the call at once.
func TestRetriesBoundedAndHonourRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    int
		body      string
		wantSends int
	}{
		{http.StatusBadGateway, "<html>bad gateway</html>", 5},
		{http.StatusServiceUnavailable, "", 5},
		{http.StatusGatewayTimeout, "", 5},
		{http.StatusTooManyRequests, "", 5},
		{http.StatusInternalServerError, "", 1},
		{http.StatusBadRequest, "", 1},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				rw.WriteHeader(tt.status)
				fmt.Fprint(rw, tt.body)
			}))
			defer ts.Close()
			w := &wire{}
			_, err := newClient(t, ts.URL, "k", w).Stats(t.Context())
			var p *client.Problem
			if !errors.As(err, &p) || p.Status != tt.status {
				t.Errorf("err = %v, want a %d problem", err, tt.status)
			}
			if n := len(w.requests()); n != tt.wantSends {
				t.Errorf("sent %d requests, want %d", n, tt.wantSends)
			}
		})
	}

	t.Run("Retry-After past the deadline", func(t *testing.T) {
		t.Parallel()
		ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Retry-After", "30")
			rw.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer ts.Close()
		w := &wire{}
		ctx, cancel := contextWithTimeout(t, 2*time.Second)
		defer cancel()
		_, err := newClient(t, ts.URL, "k", w).Stats(ctx)
		// Waiting would end in the deadline; the call ends with the 503.
		if !errors.As(err, new(*client.Problem)) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want the 503 at once, not the deadline", err)
		}
		if n := len(w.requests()); n != 1 {
			t.Errorf("sent %d requests, want 1", n)
		}
	})
}
