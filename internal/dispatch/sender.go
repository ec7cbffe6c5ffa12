package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxAnswer is what is read of an endpoint's answer: enough to reuse the
// connection for a short body, never a large one into memory.
const maxAnswer = 64 << 10

// sender posts deliveries: bounded in time, following no redirect (a 3xx is
// a failed attempt), reading at most maxAnswer of an answer, and dialing
// only hosts on the allow-list when there is one.
type sender struct {
	http *http.Client
}

func newSender(timeout time.Duration, allowed []string) *sender {
	dialer := &net.Dialer{Timeout: min(timeout, 5*time.Second)}
	tr := &http.Transport{
		Proxy: nil, // deliveries go where the endpoint says, not through a proxy of the environment
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if len(allowed) > 0 && !slices.Contains(allowed, strings.ToLower(host)) {
				return nil, fmt.Errorf("%w: %s", ErrHostNotAllowed, host)
			}
			return dialer.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &sender{http: &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// send posts body with header to url and answers the status, or an error
// when there was no answer.
func (s *sender) send(ctx context.Context, url string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tokend-webhooks")
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, errors.Unwrap(err) // the *url.Error would repeat the URL, which may hold a secret path
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	return resp.StatusCode, nil
}
