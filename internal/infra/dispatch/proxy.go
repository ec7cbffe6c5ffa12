package dispatch

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// ProxyFunc says through which egress proxy a delivery to a URL goes; nil
// when it connects directly.
type ProxyFunc func(target *url.URL) (*url.URL, error)

// ParseProxy reads TOKEND_WEBHOOK_PROXY: empty, deliveries connect directly;
// "env", the standard HTTPS_PROXY, HTTP_PROXY and NO_PROXY variables decide
// (loopback targets never go through a proxy); otherwise an http:// proxy
// URL, with user and password when it asks for them, that every delivery
// goes through.
func ParseProxy(v string, getenv func(string) string) (ProxyFunc, error) {
	switch v = strings.TrimSpace(v); v {
	case "":
		return nil, nil
	case "env":
		cfg := &httpproxy.Config{
			HTTPProxy:  cmpEnv(getenv, "HTTP_PROXY", "http_proxy"),
			HTTPSProxy: cmpEnv(getenv, "HTTPS_PROXY", "https_proxy"),
			NoProxy:    cmpEnv(getenv, "NO_PROXY", "no_proxy"),
		}
		for _, p := range []string{cfg.HTTPProxy, cfg.HTTPSProxy} {
			if p == "" {
				continue
			}
			if _, err := proxyURL(p); err != nil {
				return nil, err
			}
		}
		pf := cfg.ProxyFunc()
		return func(target *url.URL) (*url.URL, error) { return pf(target) }, nil
	}
	u, err := proxyURL(v)
	if err != nil {
		return nil, err
	}
	return func(*url.URL) (*url.URL, error) { return u, nil }, nil
}

func cmpEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// proxyURL checks a proxy's URL: http://host:port. An https:// proxy is
// not supported: the tunnel to it would be TLS inside TLS.
func proxyURL(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("dispatch: webhook proxy %q: want http://host:port (user:password@ allowed)", redactProxy(v))
	}
	return u, nil
}

// redactProxy hides a proxy URL's password in an error.
func redactProxy(v string) string {
	if u, err := url.Parse(v); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// viaProxyKey carries, in a dial's context, the proxy a delivery goes
// through.
type viaProxyKey struct{}

// errProxy is an attempt the proxy did not tunnel, as the tenant reads it:
// nothing about the proxy or the target.
var errProxy = errors.New("no answer: the egress proxy refused the connection")

// tunnel asks the proxy at proxy to connect to target, an IP address and
// port the dialer's guard allowed, and answers the tunnel. The proxy is
// given the address, never the name, so it resolves nothing: the address
// tokend judged is the one it connects to.
func tunnel(ctx context.Context, d *net.Dialer, proxy *url.URL, target string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", proxy.Host)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(d.Timeout))
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if u := proxy.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || br.Buffered() > 0 {
		c.Close()
		return nil, errProxy
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
