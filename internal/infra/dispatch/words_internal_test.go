package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// internalNames are what a tenant must never read: package prefixes,
// Go's own error texts and the dispatcher's result labels.
var internalNames = []string{"dispatch:", "refused: address", "host not allowed", "invalid request:", "preempted:",
	"dial tcp", "context deadline", "answered", "not_allowed", "%!"}

// TestExplainSpeaksPlainly: each refusal of the endpoint calls reads as
// one sentence in the tenant's words, without the "dispatch: …" chain, and
// names the setting that decides it.
func TestExplainSpeaksPlainly(t *testing.T) {
	t.Parallel()
	refusal := func(raw string, allowed ...string) error { return CheckURL(raw, allowed) }
	tests := []struct {
		name string
		err  error
		want []string // each in the sentence
	}{
		{"loopback address", refusal("http://127.0.0.1/hook"), []string{"loopback, private or reserved address", "TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"metadata address", refusal("http://169.254.169.254/"), []string{"reserved address", "TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"localhost", refusal("http://localhost./"), []string{"reserved address", "TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"not on the allow-list", refusal("https://elsewhere.example/", "hooks.example"), []string{"elsewhere.example is not on the server's allow-list, TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"not a URL", refusal("ftp://hooks.example/"), []string{`url "ftp://hooks.example/": want an absolute http or https URL`}},
		{"credentials", refusal("https://u:p@hooks.example/"), []string{"credentials in a URL"}},
		{"port", refusal("https://hooks.example:0/"), []string{`port "0"`}},
		{"too many", fmt.Errorf("%w: your tenant has the most webhook endpoints this server allows (%d, TOKEND_WEBHOOK_MAX_ENDPOINTS); delete one first", ErrTooManyEndpoints, 3),
			[]string{"your tenant has the most webhook endpoints this server allows (3, TOKEND_WEBHOOK_MAX_ENDPOINTS)", "TOKEND_WEBHOOK_MAX_ENDPOINTS"}},
		{"not found", ErrNotFound, []string{"no webhook endpoint with this id"}},
		{"key reused", ErrKeyReused, []string{"Idempotency-Key was already used"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no refusal to explain")
			}
			got := Explain(tt.err)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Explain(%q) = %q, want it to say %q", tt.err, got, w)
				}
			}
			for _, n := range internalNames {
				if strings.Contains(got, n) {
					t.Errorf("Explain(%q) = %q: it says %q", tt.err, got, n)
				}
			}
		})
	}
}

// TestAttemptErrorsSpeakPlainly: what a tenant reads back about a failed
// attempt says what happened once (never the status its line already
// shows: "answered 503: answered 503"), without Go's or the dispatcher's
// names, and names the setting where one decides it.
func TestAttemptErrorsSpeakPlainly(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		sendErr   error
		status    int
		throttled bool
		want      string // in the text; "" for no text at all
	}{
		{"plain refusal", nil, 503, false, ""},
		{"server error", nil, 500, false, ""},
		{"throttled", nil, 503, true, "the next attempt is in 30s"},
		{"gone", nil, 410, false, "the endpoint is disabled"},
		{"address not allowed", ErrAddressNotAllowed, 0, false, "TOKEND_WEBHOOK_ALLOWED_HOSTS"},
		{"address not allowed, wrapped", fmt.Errorf("dial tcp 10.0.0.1:80: %w", ErrAddressNotAllowed), 0, false, "TOKEND_WEBHOOK_ALLOWED_HOSTS"},
		{"timeout", errTimeout, 0, false, "no answer within 10s (TOKEND_WEBHOOK_TIMEOUT)"},
		{"deadline", context.DeadlineExceeded, 0, false, "TOKEND_WEBHOOK_TIMEOUT"},
		{"dns", errDNS, 0, false, "did not resolve"},
		{"refused", errRefused, 0, false, "refused the connection"},
		{"tls", errTLS, 0, false, "TLS handshake failed"},
		{"proxy", errProxy, 0, false, "TOKEND_WEBHOOK_PROXY"},
		{"preempted", errPreempted, 0, false, "other tenants' deliveries were waiting"},
		{"key retired", errKeyRetired, 0, false, "rotate the endpoint's secret"},
		{"bad url", errBadURL, 0, false, "register the endpoint again"},
		{"no connection", errNoConnect, 0, false, "the connection to the receiver failed"},
		{"anything else", errors.New("json: unsupported value: NaN"), 0, false, "the server could not prepare the delivery"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := attemptError(tt.sendErr, tt.status, tt.throttled, 30*time.Second, 10*time.Second)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("attemptError(%v, %d) = %q, want %q in it", tt.sendErr, tt.status, got, tt.want)
			}
			if tt.status != 0 && strings.Contains(got, fmt.Sprint(tt.status)) {
				t.Errorf("attemptError(%d) = %q: it repeats the status", tt.status, got)
			}
			for _, n := range internalNames {
				if strings.Contains(got, n) {
					t.Errorf("attemptError(%v) = %q: it says %q", tt.sendErr, got, n)
				}
			}
		})
	}
}
