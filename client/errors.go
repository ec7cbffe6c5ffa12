package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Problem is an error answer of tokend: an RFC 9457 problem detail with the
// stable Code the sentinels below match, and the X-Request-Id of the answer,
// which ties it to the server's log line.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// Field and Reason, on an invalid_request refusing one input, name it
	// and say why: "ttl_seconds", "must be a positive integer".
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason,omitempty"`
	// RequestID is the answer's X-Request-Id header.
	RequestID string `json:"-"`
	// RetryAfter is the answer's Retry-After, in seconds, zero when absent.
	RetryAfter int `json:"-"`
}

// Error returns the code and the detail, and for an unknown outcome what the
// caller should do about it.
func (p *Problem) Error() string {
	msg := fmt.Sprintf("tokend: %d %s: %s", p.Status, p.Code, p.Detail)
	if p.Code == codeOutcomeUnknown {
		msg += " (do not retry: wait until an operator reconciles the token, then read its state)"
	}
	if p.RequestID != "" {
		msg += " [request " + p.RequestID + "]"
	}
	return msg
}

// Is reports whether target is the sentinel of p's code, so that
// errors.Is(err, client.ErrTokenExpired) works on any error a call returns.
func (p *Problem) Is(target error) bool {
	s, ok := target.(*sentinel)
	return ok && s.code == p.Code
}

// sentinel is the error value of one problem code.
type sentinel struct{ code string }

func (s *sentinel) Error() string { return "tokend: " + s.code }

func code(c string) error { return &sentinel{code: c} }

const codeOutcomeUnknown = "outcome_unknown"

// The sentinels, one per problem code tokend answers with. Match them with
// errors.Is; errors.As to a *Problem gives the status, detail and request id.
var (
	// ErrIdempotencyKeyMissing: an issue request without an Idempotency-Key.
	ErrIdempotencyKeyMissing = code("idempotency_key_missing")
	// ErrInvalidRequest: the request is malformed; change it, do not retry it.
	ErrInvalidRequest = code("invalid_request")
	// ErrUnknownOperation: the operation is not declared for the tenant.
	ErrUnknownOperation = code("unknown_operation")
	// ErrOperationNotRunnable: a declaration no spend could run.
	ErrOperationNotRunnable = code("operation_not_runnable")
	// ErrUnauthorized: the API key is missing, unknown or revoked.
	ErrUnauthorized = code("unauthorized")
	// ErrForbidden: the key's role may not use the route.
	ErrForbidden = code("forbidden")
	// ErrBindingMismatch: the token was issued for another subject or operation.
	ErrBindingMismatch = code("binding_mismatch")
	// ErrTokenNotFound: no such token for the caller's tenant.
	ErrTokenNotFound = code("token_not_found")
	// ErrNotFound: no such route.
	ErrNotFound = code("not_found")
	// ErrMethodNotAllowed: the route does not take the method.
	ErrMethodNotAllowed = code("method_not_allowed")
	// ErrInProgress: another holder is executing the token. The client
	// retries it; a caller sees it only once its retries are spent.
	ErrInProgress = code("in_progress")
	// ErrStaleGeneration: a newer generation holds the execution rights.
	ErrStaleGeneration = code("stale_generation")
	// ErrOutcomeUnknown: the outcome of the token's execution is unknown.
	// It is never retried: wait until an operator reconciles the token.
	ErrOutcomeUnknown = code(codeOutcomeUnknown)
	// ErrInvalidState: the token's state does not allow the action.
	ErrInvalidState = code("invalid_state")
	// ErrReportConflict: a different report was recorded for the generation.
	ErrReportConflict = code("report_conflict")
	// ErrBuiltinOperation: built-in operations keep their declaration.
	ErrBuiltinOperation = code("builtin_operation")
	// ErrOperationInUse: the operation has unfinished tokens.
	ErrOperationInUse = code("operation_in_use")
	// ErrTokenExpired: the token expired before it was spent.
	ErrTokenExpired = code("token_expired")
	// ErrTokenRevoked: an operator revoked the token.
	ErrTokenRevoked = code("token_revoked")
	// ErrTokenKeyRetired: the token's secret was derived under a retired
	// server key and can no longer be spent.
	ErrTokenKeyRetired = code("token_key_retired")
	// ErrIntentKeyRetired: the intent's token was derived under a retired
	// server key; check its state before starting over under a new intent.
	ErrIntentKeyRetired = code("intent_key_retired")
	// ErrPayloadTooLarge: the request body is over the server's bound.
	ErrPayloadTooLarge = code("payload_too_large")
	// ErrUnsupportedMediaType: the body was sent with a Content-Type other
	// than application/json, or encoded (Content-Encoding).
	ErrUnsupportedMediaType = code("unsupported_media_type")
	// ErrHeadersTooLarge: the request line and headers (a long path
	// included) are over the server's bound.
	ErrHeadersTooLarge = code("headers_too_large")
	// ErrExpectationFailed: an Expect header other than 100-continue.
	ErrExpectationFailed = code("expectation_failed")
	// ErrUnsupportedTransferEncoding: a Transfer-Encoding other than chunked.
	ErrUnsupportedTransferEncoding = code("unsupported_transfer_encoding")
	// ErrHTTPVersionNotSupported: a request of an HTTP version other than 1.x in clear text.
	ErrHTTPVersionNotSupported = code("http_version_not_supported")
	// ErrIdempotencyKeyReused: the intent ID was used for a different request.
	ErrIdempotencyKeyReused = code("idempotency_key_reused")
	// ErrPayloadMismatch: the payload differs from the one the token was issued for.
	ErrPayloadMismatch = code("payload_mismatch")
	// ErrPayloadMissing: the token is bound to a payload and the spend carried none.
	ErrPayloadMissing = code("payload_missing")
	// ErrRateLimited: too many requests; the client retries after Retry-After.
	ErrRateLimited = code("rate_limited")
	// ErrInternal: a server bug; the request id finds it in the server's log.
	ErrInternal = code("internal")
	// ErrUnavailable: the database is unavailable; the client retries.
	ErrUnavailable = code("unavailable")
	// ErrOperationChanging: the operation was redeclared during the request;
	// nothing happened and the client retries.
	ErrOperationChanging = code("operation_changing")
	// ErrCursorAhead: the feed never handed out the cursor's position (the
	// cursor comes from another database); the detail names its last one.
	ErrCursorAhead = code("cursor_ahead")
	// ErrCursorEpoch: the cursor is from an earlier epoch of the feed and
	// past the position where the feed, restored from an older backup, left
	// that epoch; the detail says where to resume (after and epoch).
	ErrCursorEpoch = code("cursor_epoch")
	// ErrTooManyWaiters: the server parks as many long polls of the feed as
	// it allows; read again after Retry-After (Follow does).
	ErrTooManyWaiters = code("too_many_waiters")
	// ErrTooManyEndpoints: the tenant has as many webhook endpoints as the
	// server allows (TOKEND_WEBHOOK_MAX_ENDPOINTS); delete one first.
	ErrTooManyEndpoints = code("too_many_endpoints")
)

// Sentinels maps every problem code tokend documents to its sentinel.
func Sentinels() map[string]error {
	m := map[string]error{}
	for _, e := range []error{
		ErrIdempotencyKeyMissing, ErrInvalidRequest, ErrUnknownOperation, ErrOperationNotRunnable,
		ErrUnauthorized, ErrForbidden, ErrBindingMismatch, ErrTokenNotFound, ErrNotFound,
		ErrMethodNotAllowed, ErrInProgress, ErrStaleGeneration, ErrOutcomeUnknown, ErrInvalidState,
		ErrReportConflict, ErrBuiltinOperation, ErrOperationInUse, ErrTokenExpired, ErrTokenRevoked,
		ErrTokenKeyRetired, ErrIntentKeyRetired, ErrPayloadTooLarge, ErrIdempotencyKeyReused,
		ErrPayloadMismatch, ErrRateLimited, ErrInternal, ErrUnavailable, ErrOperationChanging,
		ErrUnsupportedMediaType, ErrHeadersTooLarge, ErrCursorAhead, ErrCursorEpoch, ErrTooManyWaiters, ErrPayloadMissing, ErrTooManyEndpoints,
		ErrExpectationFailed, ErrUnsupportedTransferEncoding, ErrHTTPVersionNotSupported,
	} {
		m[e.(*sentinel).code] = e
	}
	return m
}

// problemOf reads the *Problem of an error answer. A body that is not a
// problem (a proxy's error page, say) becomes one whose code is derived from
// the status and whose detail quotes the body, shortened.
func problemOf(resp *http.Response, body []byte) *Problem {
	p := &Problem{}
	if json.Unmarshal(body, p) != nil || p.Code == "" {
		p = &Problem{Title: http.StatusText(resp.StatusCode)}
		p.Code = strings.ToLower(strings.ReplaceAll(p.Title, " ", "_"))
		d := strings.TrimSpace(string(body))
		if len(d) > 200 {
			d = d[:200] + "…"
		}
		p.Detail = fmt.Sprintf("HTTP %d %s", resp.StatusCode, d)
	}
	p.Status = resp.StatusCode
	p.RequestID = resp.Header.Get("X-Request-Id")
	p.RetryAfter = retryAfterSeconds(resp.Header.Get("Retry-After"))
	return p
}
