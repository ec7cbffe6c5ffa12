package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// StatusClientClosedRequest is the status a request whose client hung up is
// counted and logged under (nginx's 499); it reaches no one.
const StatusClientClosedRequest = 499

// Problem is an RFC 9457 problem detail, the body of every error answer. It
// is also an error, so a handler can pass one to Abort to answer with it as is.
type Problem struct {
	Type   string `json:"type"`  // default: /problems/<code>, the page of Code
	Title  string `json:"title"` // default: the status text
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Code is the stable, machine-readable reason, e.g. "token_not_found".
	Code string `json:"code"`
	// Field and Reason, on an invalid_request, name the refused input and
	// say why ("ttl_seconds", "must be a positive integer"); the detail
	// says both too.
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header, in seconds.
	RetryAfter int `json:"-"`
}

// Error returns the code and the detail.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// Abort answers c with the problem err maps to and stops the handler chain.
// A *Problem is sent as is; the sentinel errors of tokend's packages
// (token.ErrNotFound, intent.ErrKeyReused, ...) get their documented status
// and code; a database that cannot be reached is a 503 with Retry-After;
// anything else is a 500 whose detail goes to the log only.
//
// A request whose client hung up (its context canceled, say a long poll
// given up) is no error of the server's: it is counted and logged as 499,
// at INFO, with no body, as no one reads it.
func Abort(c *gin.Context, err error) {
	if errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil {
		c.Set(codeKey, "client_closed_request")
		c.AbortWithStatus(StatusClientClosedRequest)
		return
	}
	p := problemFor(err)
	if p.Status >= 500 {
		_ = c.Error(err) // logged by accessLog
	}
	if p.Code == "internal" {
		p.Detail = "internal error; the server log has the details under request id " + c.GetString(requestIDKey)
	}
	if p.Type == "" {
		p.Type = problemTypePrefix + p.Code
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	c.Set(codeKey, p.Code)
	if p.Status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Bearer realm="tokend"`)
	}
	if p.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	body, _ := marshalPlain(p) // cannot fail: strings and ints
	c.Data(p.Status, "application/problem+json", body)
	c.Abort()
}

// mapping is how one sentinel error is answered.
type mapping struct {
	target error
	status int
	code   string
	title  string
	detail string
	// wraps: the detail of err's *tokend.InvalidInputError or
	// *tokend.RefusalError completes the detail. Off where it could tell one
	// missing token from another.
	wraps bool
}

// mappings are tried in order; the first target err matches wins.
var mappings = []mapping{
	{token.ErrNotFound, http.StatusNotFound, "token_not_found", "Token not found", "no such token", false},
	{token.ErrExpired, http.StatusGone, "token_expired", "Token expired", "the token has expired", false},
	{token.ErrRevoked, http.StatusGone, "token_revoked", "Token revoked", "the token was revoked", false},
	{intent.ErrKeyRetired, http.StatusGone, "intent_key_retired", "Intent's token retired", "the token of this Idempotency-Key was derived under a retired server key and can be neither returned nor spent; check its state (GET /v1/tokens/{id}) before starting the intent over under a new Idempotency-Key", true},
	{token.ErrKeyRetired, http.StatusGone, "token_key_retired", "Token key retired", "the token's secret was derived under a retired server key; it can no longer be spent", false},
	{token.ErrOutcomeUnknown, http.StatusConflict, "outcome_unknown", "Outcome unknown", "the outcome of this token's execution is unknown until an operator reconciles it", false},
	{token.ErrStaleGeneration, http.StatusConflict, "stale_generation", "Stale generation", "execution rights for this token were granted to a newer generation", false},
	{token.ErrInvalidState, http.StatusConflict, "invalid_state", "Invalid state", "the token's state does not allow this", true},
	{token.ErrInvalidTransition, http.StatusConflict, "invalid_state", "Invalid state", "the token's state does not allow this", true},
	{consume.ErrReportConflict, http.StatusConflict, "report_conflict", "Report conflict", "a different report was already recorded for this generation", false},
	{consume.ErrBindingMismatch, http.StatusForbidden, "binding_mismatch", "Binding mismatch", "the token was issued for another subject or operation", false},
	{consume.ErrPayloadMismatch, http.StatusUnprocessableEntity, "payload_mismatch", "Payload mismatch", "the payload differs from the one the token was issued for", false},
	{consume.ErrPayloadMissing, http.StatusUnprocessableEntity, "payload_missing", "Payload missing", "the token was issued for a payload and this spend carries none; send the payload it was issued with", false},
	{intent.ErrKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency key reused", "this Idempotency-Key was already used for a different request (operation, subject, payload or ttl)", false},
	{operation.ErrUnknown, http.StatusBadRequest, "unknown_operation", "Unknown operation", "the operation is not declared for this tenant", true},
	{operation.ErrNotRunnable, http.StatusBadRequest, "operation_not_runnable", "Operation not runnable", "no spend of the operation could run", true},
	{operation.ErrBuiltin, http.StatusConflict, "builtin_operation", "Built-in operation", "built-in operations keep their mode and cannot be deleted", true},
	{operation.ErrInUse, http.StatusConflict, "operation_in_use", "Operation in use", "the operation has unfinished tokens", true},
	{consume.ErrNoHandler, http.StatusBadRequest, "unknown_operation", "Unknown operation", "the operation is atomic but this server has no handler for it; declare it in lease mode", true},
	{intent.ErrInvalidRequest, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid request", true},
	{consume.ErrInvalidPayload, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid payload", true},
	{token.ErrInvalidPayload, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid payload", true},
	{operation.ErrInvalid, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid operation policy", true},
	{admin.ErrInvalidRequest, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid request", true},
	{inspect.ErrInvalidFilter, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid filter", true},
	{token.ErrInvalidStatus, http.StatusBadRequest, "invalid_request", "Invalid request", "invalid outcome status", true},
	{token.ErrMalformedSecret, http.StatusBadRequest, "invalid_request", "Invalid request", "token is not a well-formed token secret", false},
	{apikey.ErrUnauthorized, http.StatusUnauthorized, "unauthorized", "Unauthorized", "a valid API key is required: Authorization: Bearer <key>", false},
}

func problemFor(err error) Problem {
	var (
		p          *Problem
		tooLarge   *http.MaxBytesError
		inProgress *consume.InProgressError
		payload    *consume.PayloadError
	)
	switch {
	case errors.As(err, &p):
		return *p
	case errors.As(err, &payload):
		// A handler's refusal, at issue or at spend: the field and the rule.
		return Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request",
			Detail: "invalid payload: " + payload.Detail(), Field: joinField("payload", payload.Field), Reason: payload.Rule}
	case errors.As(err, &tooLarge):
		return Problem{Status: http.StatusRequestEntityTooLarge, Code: "payload_too_large", Title: "Payload too large",
			Detail: fmt.Sprintf("the request body exceeds %d bytes", tooLarge.Limit)}
	case errors.Is(err, intent.ErrOperationChanging):
		// Nothing is wrong with the request: the same one succeeds once the
		// operator's redeclarations settle.
		return Problem{Status: http.StatusServiceUnavailable, Code: "operation_changing", Title: "Operation changing",
			Detail: "the operation was redeclared while the token was being issued; nothing was issued, retry the same request", RetryAfter: 1}
	case store.NotText(err):
		// Every way in checks text first; this is the backstop, so that a
		// path that missed it answers 400 rather than 500.
		return Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request",
			Detail: "a value is not valid UTF-8 text without NUL characters"}
	case errors.As(err, &inProgress), errors.Is(err, token.ErrInProgress):
		retry := 1
		if inProgress != nil {
			retry = max(1, inProgress.RetryAfterSeconds)
		}
		return Problem{Status: http.StatusConflict, Code: "in_progress", Title: "In progress",
			Detail: "another holder is executing this token; retry later", RetryAfter: retry}
	}
	for _, m := range mappings {
		if !errors.Is(err, m.target) {
			continue
		}
		p := Problem{Status: m.status, Code: m.code, Title: m.title, Detail: m.detail}
		var (
			invalid *tokend.InvalidInputError
			refusal *tokend.RefusalError
		)
		switch {
		case errors.As(err, &invalid):
			p.Field, p.Reason = invalid.Field, invalid.Reason
			if m.wraps && invalid.Detail() != "" {
				p.Detail += ": " + invalid.Detail()
			}
		case m.wraps && errors.As(err, &refusal):
			p.Detail += ": " + refusal.Detail
		}
		return p
	}
	if store.Unavailable(err) {
		return Problem{Status: http.StatusServiceUnavailable, Code: "unavailable", Title: "Service unavailable",
			Detail: "the database is unavailable; retry later", RetryAfter: 1}
	}
	return Problem{Status: http.StatusInternalServerError, Code: "internal", Title: "Internal error"}
}

func joinField(outer, inner string) string {
	if inner == "" {
		return outer
	}
	return outer + "." + inner
}
