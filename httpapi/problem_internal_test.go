package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A database that went away, however it went, is a 503 the client may retry,
// never a 500 it would give up on.
func TestDatabaseOutagesAreUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"server crashed mid-read", fmt.Errorf("intent: insert: %w", io.ErrUnexpectedEOF), http.StatusServiceUnavailable},
		{"connection closed", fmt.Errorf("apikey: resolve: %w", pgconn.ErrConnClosed), http.StatusServiceUnavailable},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, http.StatusServiceUnavailable},
		{"connection exception", &pgconn.PgError{Code: "08006"}, http.StatusServiceUnavailable},
		{"deadline", fmt.Errorf("consume: %w", context.DeadlineExceeded), http.StatusServiceUnavailable},
		{"a bug", errors.New("consume: token in unexpected state"), http.StatusInternalServerError},
		{"a constraint", &pgconn.PgError{Code: "23505"}, http.StatusInternalServerError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := problemFor(tc.err)
			if p.Status != tc.want {
				t.Fatalf("status = %d, want %d", p.Status, tc.want)
			}
			if tc.want == http.StatusServiceUnavailable && p.RetryAfter < 1 {
				t.Fatal("a 503 without Retry-After")
			}
		})
	}
}
