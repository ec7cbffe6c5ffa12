// Package websession holds what tokend's browser-facing pages (the demo app
// and the operator console) share: signed cookie values and the same-origin
// check their POSTs pass before anything else.
package websession

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// Signer signs cookie values so that a browser cannot change them.
type Signer struct{ key []byte }

// NewSigner derives a signing key of its own, for purpose, from the server
// key, so that a signature made for one purpose is worth nothing for another.
func NewSigner(serverKey, purpose string) Signer {
	m := hmac.New(sha256.New, []byte(serverKey))
	m.Write([]byte(purpose))
	return Signer{key: m.Sum(nil)}
}

// Sign encodes v as JSON and signs it.
func (s Signer) Sign(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	body := base64.RawURLEncoding.EncodeToString(b)
	return body + "." + base64.RawURLEncoding.EncodeToString(s.mac(body)), nil
}

// Verify decodes a value made by Sign into v, and reports whether it was.
func (s Signer) Verify(signed string, v any) bool {
	body, sig, ok := strings.Cut(signed, ".")
	if !ok {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(body)) {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	return err == nil && json.Unmarshal(b, v) == nil
}

func (s Signer) mac(body string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// SameOrigin reports whether r was sent by a page of its own origin: the
// same scheme (https when the browser came over HTTPS, see IsHTTPS, else
// http) and the same host and port. An http:// page of the same host is
// another origin (anyone on the network can write it). Browsers send Origin
// with every POST; Referer is the fallback for the few that do not. A
// request that names neither is not.
func SameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	u, err := url.Parse(from)
	if from == "" || err != nil {
		return false
	}
	scheme := "http"
	if IsHTTPS(r) {
		scheme = "https"
	}
	return strings.EqualFold(u.Scheme, scheme) && u.Host != "" &&
		strings.EqualFold(hostPort(u.Host, scheme), hostPort(r.Host, scheme))
}

// hostPort returns host with the scheme's default port dropped, as browsers
// drop it from Origin.
func hostPort(host, scheme string) string {
	if scheme == "https" {
		return strings.TrimSuffix(host, ":443")
	}
	return strings.TrimSuffix(host, ":80")
}
