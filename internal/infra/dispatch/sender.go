package dispatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// maxAnswer is what is read of an endpoint's answer: enough to reuse the
// connection for a short body, never a large one into memory.
const maxAnswer = 64 << 10

// maxAnswerHeaders bounds an endpoint's answer's headers: net/http's
// default is 1 MiB, and an endpoint could make every attempt hold that
// much.
const maxAnswerHeaders = 64 << 10

// encodeBody is a delivery's body: JSON without HTML escaping, so that an
// outcome holding <, > or & arrives as stored, not six times its size.
func encodeBody(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// lookupFunc resolves a host name to the addresses to dial.
type lookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// sender posts deliveries: bounded in time, following no redirect (a 3xx is
// a failed attempt), reading at most maxAnswer of an answer, and connecting
// only to addresses its policy allows, judged in the dialer on the address
// dialed.
type sender struct {
	http    *http.Client
	timeout time.Duration
	proxy   ProxyFunc // nil: every delivery connects directly
}

func newSender(timeout time.Duration, p policy, lookup lookupFunc, control func(context.Context, string, string, syscall.RawConn) error, proxy ProxyFunc) *sender {
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if control == nil {
		control = p.control
	}
	dialer := &net.Dialer{Timeout: min(timeout, 5*time.Second), ControlContext: control}
	// The operator named the proxy: it is dialed without the guard, which
	// judges the addresses it is asked to tunnel to instead.
	proxyDialer := &net.Dialer{Timeout: dialer.Timeout}
	tr := &http.Transport{
		Proxy: nil, // deliveries go where the endpoint says, not through a proxy of the environment
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if p.allowsName(host) {
				ctx = context.WithValue(ctx, nameAllowedKey{}, true)
			}
			var addrs []netip.Addr
			if a, err := netip.ParseAddr(host); err == nil {
				addrs = []netip.Addr{a}
			} else if addrs, err = lookup(ctx, host); err != nil {
				return nil, err
			}
			// Every address is dialed as a literal, so the dialer resolves
			// nothing again and control judges each one. Through a proxy,
			// control judges the address before the proxy is asked to
			// tunnel to that same literal.
			via, _ := ctx.Value(viaProxyKey{}).(*url.URL)
			err = &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
			for _, a := range addrs {
				target := net.JoinHostPort(a.Unmap().String(), port)
				var c net.Conn
				if via == nil {
					c, err = dialer.DialContext(ctx, network, target)
				} else if err = control(ctx, network, target, nil); err == nil {
					c, err = tunnel(ctx, proxyDialer, via, target)
				}
				if err == nil {
					return c, nil
				}
			}
			return nil, err
		},
		TLSHandshakeTimeout:    timeout,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: maxAnswerHeaders,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
	}
	return &sender{timeout: timeout, proxy: proxy, http: &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// answer is what an endpoint answered.
type answer struct {
	status     int
	retryAfter string // the Retry-After header, when there was one
}

// send posts body with header to url and answers the status, or an error
// when there was no answer; the error's text is safe to show the tenant.
func (s *sender) send(ctx context.Context, url string, header http.Header, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return answer{}, errBadURL
	}
	if s.proxy != nil {
		via, err := s.proxy(req.URL)
		if err != nil {
			return answer{}, errProxy
		}
		if via != nil {
			req = req.WithContext(context.WithValue(ctx, viaProxyKey{}, via))
		}
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tokend-webhooks")
	resp, err := s.http.Do(req)
	if err != nil {
		return answer{}, describe(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	return answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}, nil
}

// Errors of an attempt without an answer, as the tenant reads them: what
// went wrong, never the address, port or resolver behind it.
var (
	errTimeout   = errors.New("timeout: no answer in time")
	errDNS       = errors.New("dns: the host name did not resolve")
	errRefused   = errors.New("connection refused")
	errTLS       = errors.New("tls handshake failed")
	errNoConnect = errors.New("no answer: the connection failed")
)

func describe(err error) error {
	var dns *net.DNSError
	var ne net.Error
	var tlsErr *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case errors.Is(err, ErrAddressNotAllowed):
		return ErrAddressNotAllowed
	case errors.Is(err, errProxy):
		return errProxy
	case errors.As(err, &dns):
		return errDNS
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return errRefused
	case errors.As(err, &tlsErr), errors.As(err, &rec):
		return errTLS
	}
	return errNoConnect
}
