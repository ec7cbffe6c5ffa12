package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// What a tenant reads about webhooks: a refused request to the endpoint
// calls (Explain) and a failed attempt (attemptError). Each is one sentence
// in the tenant's words that says what happened and, where a setting of the
// server decides it, names that setting. The errors themselves keep their
// "dispatch: …" chains for errors.Is and the server's log; no such chain is
// shown to a tenant.

// AttemptNotAllowed is what a tenant reads back about an attempt refused
// because its host resolved to an address deliveries may not go to. It is
// the same for every such target: it says nothing about the address.
const AttemptNotAllowed = "not sent: the URL's host resolves to an address webhooks may not go to (loopback, private or reserved); the server's operator can allow it in TOKEND_WEBHOOK_ALLOWED_HOSTS"

// hostNotAllowed is Explain's sentence for a URL whose host is, as written,
// an address (or a name for this machine) deliveries may not go to.
const hostNotAllowed = "the URL's host is a loopback, private or reserved address, which webhooks are not sent to; the server's operator can allow it in TOKEND_WEBHOOK_ALLOWED_HOSTS"

// Explain returns err, a refusal of one of the endpoint calls (Create,
// CreateOnce, Rotate, Resend, Get, SetEnabled, Delete), as the one sentence
// a tenant reads in the problem's detail.
func Explain(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrAddressNotAllowed):
		return hostNotAllowed
	case errors.Is(err, ErrNotFound):
		return "your tenant has no webhook endpoint with this id"
	case errors.Is(err, ErrKeyReused):
		return "this Idempotency-Key was already used for a different webhook request (route, endpoint, url, event types or overlap); use a new key for a new request"
	}
	// The rest wrap a sentinel with the detail a tenant needs: the detail
	// alone is the sentence.
	msg := err.Error()
	for _, s := range []error{ErrInvalidRequest, ErrHostNotAllowed, ErrTooManyEndpoints} {
		if errors.Is(err, s) {
			msg = strings.TrimPrefix(msg, s.Error()+": ")
		}
	}
	return msg
}

// attemptError is what a tenant reads back about a failed attempt, beside
// its status when there was an answer (so never the status again):
// sendErr is the attempt's error (nil when the endpoint answered status);
// wait is the backoff before the next attempt when Retry-After set it.
func attemptError(sendErr error, status int, throttled bool, wait, timeout time.Duration) string {
	switch {
	case sendErr == nil && status == 410:
		return "Gone: the endpoint is disabled; enable it once the receiver is back"
	case sendErr == nil && throttled:
		return fmt.Sprintf("the endpoint asked to wait (Retry-After): the next attempt is in %s", wait.Round(time.Second))
	case sendErr == nil:
		return "" // the status says it
	case errors.Is(sendErr, ErrAddressNotAllowed):
		return AttemptNotAllowed
	case errors.Is(sendErr, errPreempted):
		return "cut short after " + preemptAfter.String() + ": other tenants' deliveries were waiting for a worker; retried with backoff"
	case errors.Is(sendErr, errTimeout), errors.Is(sendErr, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %s (TOKEND_WEBHOOK_TIMEOUT)", timeout)
	case errors.Is(sendErr, errDNS):
		return "no answer: the URL's host name did not resolve"
	case errors.Is(sendErr, errRefused):
		return "no answer: the receiver refused the connection"
	case errors.Is(sendErr, errTLS):
		return "no answer: the TLS handshake failed (check the receiver's certificate)"
	case errors.Is(sendErr, errProxy):
		return "no answer: the egress proxy refused the connection (TOKEND_WEBHOOK_PROXY)"
	case errors.Is(sendErr, errKeyRetired):
		return "not sent: the endpoint's secret was made under a retired server key; rotate the endpoint's secret"
	case errors.Is(sendErr, errNoConnect):
		return "no answer: the connection to the receiver failed"
	case errors.Is(sendErr, errBadURL):
		return "not sent: the endpoint's URL does not make a request; register the endpoint again with a valid URL"
	}
	// Not one of the sender's own errors (encoding or signing the body):
	// nothing of it is the tenant's to read.
	return "not sent: the server could not prepare the delivery; its log has the details"
}

// Errors of an attempt that was not sent.
var (
	errKeyRetired = errors.New("the endpoint's secret: its server key was retired")
	errBadURL     = errors.New("invalid request")
)
