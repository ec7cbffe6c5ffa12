package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
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

// A value Postgres cannot store is the request's fault, and an issue that
// lost every race with redeclarations of its operation is worth retrying:
// neither is a 500.
func TestRefusalsThatAreNotBugs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		retry  bool
	}{
		{"invalid byte sequence", fmt.Errorf("admin: revoke: %w", &pgconn.PgError{Code: "22021"}), http.StatusBadRequest, "invalid_request", false},
		{"untranslatable character", fmt.Errorf("consume: %w", &pgconn.PgError{Code: "22P05"}), http.StatusBadRequest, "invalid_request", false},
		{"operation changing", fmt.Errorf("%w: %q changed 3 times", intent.ErrOperationChanging, "pay.card"), http.StatusServiceUnavailable, "operation_changing", true},
		{"invalid text", fmt.Errorf("%w: %w", intent.ErrInvalidRequest, token.CheckText("subject", "a\x00")), http.StatusBadRequest, "invalid_request", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := problemFor(tc.err)
			if p.Status != tc.status || p.Code != tc.code || (p.RetryAfter > 0) != tc.retry {
				t.Fatalf("got %d %s, Retry-After %d; want %d %s, Retry-After set: %v", p.Status, p.Code, p.RetryAfter, tc.status, tc.code, tc.retry)
			}
		})
	}
}
