package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/openapi"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// TestEveryProblemCodeIsDocumented checks that each code this package can
// answer with is in the OpenAPI document, with the same status there.
func TestEveryProblemCodeIsDocumented(t *testing.T) {
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	var all []Problem
	for _, m := range mappings {
		all = append(all, Problem{Status: m.status, Code: m.code})
	}
	for _, p := range []*Problem{errNoRoute, errNoMethod, errForbidden, errRateLimited, errIdempotencyKeyMissing, errOperationNotFound, unsupportedMediaType("x")} {
		all = append(all, *p)
	}
	for _, raw := range []string{"HTTP/1.1 431 Request Header Fields Too Large" + goErrorHeaders + "431 Request Header Fields Too Large", "HTTP/1.1 400 Bad Request" + goErrorHeaders + "400 Bad Request"} {
		out, ok := rewriteGoError([]byte(raw))
		if !ok {
			t.Fatalf("%q not rewritten", raw)
		}
		_, body, _ := strings.Cut(string(out), "\r\n\r\n")
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	for _, err := range []error{
		&http.MaxBytesError{Limit: 1},
		&consume.InProgressError{},
		intent.ErrOperationChanging,
		context.Canceled,
		errors.New("a bug"),
	} {
		all = append(all, problemFor(err))
	}
	for _, p := range all {
		doc, ok := problems[p.Code]
		switch {
		case !ok:
			t.Errorf("code %s is not in the OpenAPI document's x-problems", p.Code)
		case doc.Status != p.Status && !(p.Code == "unknown_operation" && p.Status == http.StatusNotFound):
			// unknown_operation is a 404 where the operation is the resource.
			t.Errorf("code %s: status %d, the document says %d", p.Code, p.Status, doc.Status)
		}
	}
}

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
		// A handler's statement whose lock wait ran out (on Citus: a row a
		// transaction in recovery still holds); it changed nothing.
		// Citus could not commit on the worker after the statements ran:
		// the issue may or may not have committed; a retry finds out.
		{"commit outcome unknown", fmt.Errorf("intent: insert: %w: %w", store.ErrCommitUnknown, &pgconn.PgError{Code: "XX000"}), http.StatusServiceUnavailable, "unavailable", true},
		{"lock wait ran out in a handler", fmt.Errorf("consume: ledger.credit: %w", &pgconn.PgError{Code: "55P03"}), http.StatusServiceUnavailable, "unavailable", true},
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

// Every invalid input of tokend's packages is one *tokend.InvalidInputError
// naming the input and why, still matches its package's sentinel, and is
// answered 400 invalid_request with the field and reason as members and in
// the detail: no error text is read to say so.
func TestInvalidInputs(t *testing.T) {
	t.Parallel()
	okReq := intent.Request{Tenant: "t", Operation: "pay.card", IntentID: "i-1", Subject: "s", TTLSeconds: 60}
	with := func(f func(*intent.Request)) intent.Request { r := okReq; f(&r); return r }
	okPolicy := operation.Policy{Name: "pay.card"}.WithDefaults()
	policy := func(f func(*operation.Policy)) operation.Policy { p := okPolicy; f(&p); return p }
	_, malformed := token.ParseSecret("tk_short")
	_, dupKey := token.Canonical([]byte(`{"a":1,"a":2}`), nil)
	tests := []struct {
		name          string
		err           error
		sentinel      error
		field, reason string
	}{
		{"intent tenant empty", with(func(r *intent.Request) { r.Tenant = "" }).Validate(), intent.ErrInvalidRequest, "tenant", "is empty"},
		{"intent operation missing", with(func(r *intent.Request) { r.Operation = "" }).Validate(), intent.ErrInvalidRequest, "operation", "is required"},
		{"intent key too long", with(func(r *intent.Request) { r.IntentID = strings.Repeat("k", intent.MaxIntentIDLen+1) }).Validate(), intent.ErrInvalidRequest, "Idempotency-Key", fmt.Sprintf("must be 1 to %d printable characters", intent.MaxIntentIDLen)},
		{"intent subject empty", with(func(r *intent.Request) { r.Subject = "" }).Validate(), intent.ErrInvalidRequest, "subject", fmt.Sprintf("must be 1 to %d printable characters", intent.MaxSubjectLen)},
		{"intent ttl", with(func(r *intent.Request) { r.TTLSeconds = 0 }).Validate(), intent.ErrInvalidRequest, "ttl_seconds", "must be a positive integer"},
		{"intent NUL in subject", with(func(r *intent.Request) { r.Subject = "a\x00" }).Validate(), token.ErrInvalidText, "subject", "holds a NUL character (text must be valid UTF-8 without NUL)"},
		{"token payload", dupKey, token.ErrInvalidPayload, "", dupKeyReason(dupKey)},
		{"token status", token.CheckOutcomeStatus(token.Consumed, 404), token.ErrInvalidStatus, "status", "a consumed token's outcome needs a 2xx status, got 404"},
		{"token secret", malformed, token.ErrMalformedSecret, "token", "is not a well-formed token secret"},
		{"consume payload", &consume.PayloadError{Field: "amount", Rule: "must be positive"}, consume.ErrInvalidPayload, "payload.amount", "must be positive"},
		{"operation name", policy(func(p *operation.Policy) { p.Name = "Bad Name" }).Validate(), operation.ErrInvalid, "name", `"Bad Name": want lowercase dotted words like checkout.submit`},
		{"operation mode", policy(func(p *operation.Policy) { p.Mode = "sometimes" }).Validate(), operation.ErrInvalid, "mode", `"sometimes": want atomic or lease`},
		{"operation lease seconds", policy(func(p *operation.Policy) { p.LeaseSeconds = -1 }).Validate(), operation.ErrInvalid, "lease_seconds", "-1 out of range"},
		{"operation ignored field", policy(func(p *operation.Policy) { p.IgnoredFields = []string{"a..b"} }).Validate(), operation.ErrInvalid, "ignored_fields", `"a..b" is not a member name or dotted path`},
		{"inspect state", inspect.Filter{State: "gone"}.Validate(), inspect.ErrInvalidFilter, "state", `"gone" is not a state`},
		{"inspect limit", inspect.Filter{Limit: inspect.MaxLimit + 1}.Validate(), inspect.ErrInvalidFilter, "limit", fmt.Sprintf("%d: want 1 to %d", inspect.MaxLimit+1, inspect.MaxLimit)},
		{"inspect cursor", inspect.Filter{Cursor: "!!"}.Validate(), inspect.ErrInvalidFilter, "cursor", "is malformed"},
		{"admin outcome", admin.Reconciliation{Outcome: "maybe"}.Validate(), admin.ErrInvalidRequest, "outcome", `"maybe": want succeeded, not_executed or failed`},
		{"admin not executed", admin.Reconciliation{Outcome: admin.NotExecuted, Status: 200}.Validate(), admin.ErrInvalidRequest, "outcome", "not_executed stores no status or result"},
		{"admin status", admin.Reconciliation{Outcome: admin.Succeeded, Status: 500}.Validate(), token.ErrInvalidStatus, "status", "a consumed token's outcome needs a 2xx status, got 500"},
		{"admin purge", admin.PurgeOptions{BatchSize: -1}.Validate(), admin.ErrInvalidRequest, "BatchSize", "-1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var inv *tokend.InvalidInputError
			if !errors.As(tc.err, &inv) {
				t.Fatalf("%v (%T) is not a *tokend.InvalidInputError", tc.err, tc.err)
			}
			if inv.Field != tc.field || inv.Reason != tc.reason {
				t.Errorf("field, reason = %q, %q; want %q, %q", inv.Field, inv.Reason, tc.field, tc.reason)
			}
			if !errors.Is(tc.err, tc.sentinel) {
				t.Errorf("%v does not match %v", tc.err, tc.sentinel)
			}
			p := problemFor(tc.err)
			if p.Status != http.StatusBadRequest || p.Code != "invalid_request" || p.Field != tc.field || p.Reason != tc.reason {
				t.Errorf("problem = %d %s field %q reason %q; want 400 invalid_request %q %q", p.Status, p.Code, p.Field, p.Reason, tc.field, tc.reason)
			}
			if tc.name != "token secret" && !strings.Contains(p.Detail, tc.reason) {
				t.Errorf("detail %q does not say %q", p.Detail, tc.reason)
			}
		})
	}
}

// dupKeyReason is the refusal's own reason, which comes from the JSON reader.
func dupKeyReason(err error) string {
	var inv *tokend.InvalidInputError
	if errors.As(err, &inv) && inv.Reason != "" {
		return inv.Reason
	}
	return "<no reason>"
}

// A refusal that says more than its sentinel adds to the detail through
// *tokend.RefusalError, not through its text.
func TestRefusalDetail(t *testing.T) {
	t.Parallel()
	p := problemFor(tokend.Refuse(operation.ErrUnknown, "%q", "pay.card"))
	if p.Code != "unknown_operation" || p.Detail != `the operation is not declared for this tenant: "pay.card"` {
		t.Fatalf("got %s %q", p.Code, p.Detail)
	}
	// An error whose text merely resembles a sentinel's adds nothing.
	p = problemFor(fmt.Errorf("%w: %s", operation.ErrUnknown, "operation: unknown operation: x"))
	if p.Detail != "the operation is not declared for this tenant" {
		t.Fatalf("detail %q read from an error text", p.Detail)
	}
}
