package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/openapi"
)

// retried are the codes the client sends again; every other is final.
var retried = map[string]bool{"in_progress": true, "rate_limited": true, "too_many_waiters": true, "unavailable": true, "operation_changing": true}

// TestEveryProblemCodeMapsToItsSentinel answers each code the OpenAPI
// document lists and checks errors.Is with its sentinel and no other,
// errors.As to a *Problem with the request id, and whether it was retried.
func TestEveryProblemCodeMapsToItsSentinel(t *testing.T) {
	t.Parallel()
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	sentinels := client.Sentinels()
	if got, want := slices.Sorted(maps.Keys(sentinels)), slices.Sorted(maps.Keys(problems)); !slices.Equal(got, want) {
		t.Fatalf("sentinels %v\ndocument  %v", got, want)
	}
	for code, doc := range problems {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			w := &wire{}
			ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				rw.Header().Set("Content-Type", "application/problem+json")
				rw.Header().Set("X-Request-Id", "req-1")
				rw.WriteHeader(doc.Status)
				fmt.Fprintf(rw, `{"type":"/problems/%s","title":%q,"status":%d,"detail":"d","code":%q}`, code, doc.Title, doc.Status, code)
			}))
			defer ts.Close()
			c := newClient(t, ts.URL, "k", w)
			_, err := c.Token(t.Context(), "tok_1")
			var p *client.Problem
			if !errors.As(err, &p) || p.Code != code || p.Status != doc.Status || p.RequestID != "req-1" || p.Detail != "d" {
				t.Fatalf("err = %#v, want a *Problem %d %s with request id req-1", err, doc.Status, code)
			}
			for other, s := range sentinels {
				if errors.Is(err, s) != (other == code) {
					t.Errorf("errors.Is(err, sentinel of %s) = %v", other, errors.Is(err, s))
				}
			}
			want := 1
			if retried[code] {
				want = 5 // every attempt
			}
			if n := len(w.requests()); n != want {
				t.Errorf("sent %d requests, want %d", n, want)
			}
		})
	}
}

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
