package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokend/tokend/client"
)

// requestTimeout bounds one attempt of a request. tokend bounds its answers
// by its write timeout (a minute); this only catches a server that hangs.
const requestTimeout = 2 * time.Minute

// timeFormat is how tokend writes times, used for the tables so that they
// show what --json shows.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// newClient returns the API client. Its first retry of a call says so on
// stderr, with why, so that an operator is not left waiting on a silent
// command while tokend is down or restarting.
func newClient(base, key string, stderr io.Writer) (*client.Client, error) {
	return client.New(base, key,
		client.WithUserAgent("tokenctl"),
		client.WithHTTPClient(&http.Client{Timeout: requestTimeout}),
		client.WithRetryNotify(func(r client.RetryEvent) {
			if r.Attempt != 1 {
				return
			}
			what := r.Err.Error() // a *Problem: tokend's busy answer
			if at, why, _, ok := noAnswer(r.Err); ok {
				what = "no answer from tokend at " + at + " (" + why + ")"
			}
			fmt.Fprintf(stderr, "tokenctl: %s; retrying for up to %s…\n", what, r.Budget.Round(time.Second))
		}))
}

// unreachable says, in one sentence, why err, a request that got no answer
// from tokend, failed, with the address tried and what to check; ok is
// false for any other error.
func unreachable(err error) (msg string, ok bool) {
	at, why, hint, ok := noAnswer(err)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("cannot reach tokend at %s: %s; %s.", at, why, hint), true
}

// noAnswer splits a request that got no answer into the address tried, why
// it failed and what to check; ok is false for any other error.
func noAnswer(err error) (at, why, hint string, ok bool) {
	var ue *url.Error
	if !errors.As(err, &ue) || errors.Is(err, context.Canceled) {
		return "", "", "", false
	}
	at = ue.URL
	if u, perr := url.Parse(ue.URL); perr == nil {
		at = u.Scheme + "://" + u.Host
	}
	var (
		dns     *net.DNSError
		cert    *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		header  tls.RecordHeaderError
	)
	hint = "check TOKENCTL_URL or --url"
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		why, hint = "nothing listens there (connection refused)", "is tokend running, and on that port? check TOKENCTL_URL or --url"
	case errors.As(err, &dns):
		why = "the host name " + strconv.Quote(dns.Name) + " does not resolve"
	case errors.As(err, &cert), errors.As(err, &unknown):
		why, hint = "its TLS certificate is not trusted", "check the certificate, or the host name in TOKENCTL_URL"
	case errors.As(err, &header), errors.Is(err, http.ErrSchemeMismatch):
		why, hint = "it does not speak TLS there", "use http:// in TOKENCTL_URL, or the proxy that terminates TLS"
	case ue.Timeout():
		why, hint = "no answer came in time", "is tokend or the network between overloaded? try again, or check TOKENCTL_URL"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// net/http's words when a connection closes as a retry reuses it.
		strings.Contains(err.Error(), "server closed idle connection"):
		why, hint = "the connection was closed before an answer came", "is something other than tokend listening there, or did it restart? try again"
	default:
		why = ue.Err.Error()
	}
	return at, why, hint, true
}
