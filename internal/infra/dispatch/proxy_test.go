package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// connectProxy is an egress proxy of the test kit: it tunnels CONNECT
// requests and records what it was asked to connect to.
type connectProxy struct {
	srv   *httptest.Server
	mu    sync.Mutex
	asked []string
	auth  []string
}

func newConnectProxy(t *testing.T) *connectProxy {
	p := &connectProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.asked = append(p.asked, r.Host)
		p.auth = append(p.auth, r.Header.Get("Proxy-Authorization"))
		p.mu.Unlock()
		if r.Method != http.MethodConnect {
			http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		down, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			up.Close()
			down.Close()
			return
		}
		go func() { _, _ = io.Copy(up, down); up.Close() }()
		_, _ = io.Copy(down, up)
		down.Close()
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *connectProxy) requests() ([]string, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...), append([]string(nil), p.auth...)
}

// TestDeliveriesThroughAnEgressProxy: with TOKEND_WEBHOOK_PROXY set, a
// delivery reaches its receiver through the proxy, which is asked to
// tunnel to the address the guard allowed, never to a name it would
// resolve again; a target whose address the guard refuses is never asked
// of the proxy at all, and the tenant reads the usual refusal.
func TestDeliveriesThroughAnEgressProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy := newConnectProxy(t)
	pu, _ := url.Parse(proxy.srv.URL)
	pu.User = url.UserPassword("egress", "s3cret")
	via, err := dispatch.ParseProxy(pu.String(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}

	pool := pgtest.NewPool(t)
	keys := keyring(t)
	cons := newConsumer(t, pool)
	ru, _ := url.Parse(cons.srv.URL)
	_, secret, err := dispatch.Create(ctx, pool, keys, []string{"receiver.test"}, "a",
		dispatch.NewEndpoint{URL: "http://receiver.test:" + ru.Port() + "/hook"})
	if err != nil {
		t.Fatal(err)
	}
	cons.secret.Store(secret)
	writeEvents(t, pool, "a", 2)
	var seen sync.Map
	cfg := dispatch.WithTestNetwork(dispatch.Config{Pool: pool, Keys: keys, AllowedHosts: []string{"receiver.test"}, Proxy: via,
		Logger: slog.New(slog.DiscardHandler)}, resolveTo("127.0.0.1"), loopbackOnly(&seen))
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`) == 2
	})
	asked, auth := proxy.requests()
	if len(asked) == 0 {
		t.Fatal("the deliveries did not go through the proxy")
	}
	for i, a := range asked {
		if a != "127.0.0.1:"+ru.Port() || auth[i] == "" {
			t.Errorf("the proxy was asked to CONNECT %q (authorization %q), want the allowed address 127.0.0.1:%s with the proxy's credentials", a, auth[i], ru.Port())
		}
	}

	// A name resolving to a private address the operator did not allow.
	pool2 := pgtest.NewPool(t)
	ep, _, err := dispatch.Create(ctx, pool2, keys, nil, "a", dispatch.NewEndpoint{URL: "https://inward.test/hook"})
	if err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool2, "a", 1)
	before := len(asked)
	var seen2 sync.Map
	d2, err := dispatch.New(dispatch.WithTestNetwork(dispatch.Config{Pool: pool2, Keys: keys, Proxy: via, Logger: slog.New(slog.DiscardHandler)},
		resolveTo("10.1.2.3"), loopbackOnly(&seen2)))
	if err != nil {
		t.Fatal(err)
	}
	until(t, d2, func() bool { return count(t, pool2, `SELECT count(*) FROM webhook_attempts`) > 0 })
	if asked, _ := proxy.requests(); len(asked) != before {
		t.Errorf("the proxy was asked %v for a refused target", asked[before:])
	}
	var msg string
	if err := pool2.QueryRow(ctx, `SELECT error FROM webhook_attempts WHERE endpoint_id = $1`, ep.ID).Scan(&msg); err != nil || msg != dispatch.AttemptNotAllowed {
		t.Errorf("attempt error %q, %v; want the usual refusal", msg, err)
	}
}

// TestParseProxy: the proxy setting is off, the standard variables, or one
// http:// proxy; anything else is refused without echoing a password.
func TestParseProxy(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HTTPS_PROXY": "http://egress:3128", "NO_PROXY": "internal.example"}
	getenv := func(k string) string { return env[k] }
	for _, c := range []struct {
		value, target, want string
		err                 bool
	}{
		{"", "https://a.example/", "", false},
		{"http://p:3128", "https://a.example/", "http://p:3128", false},
		{"env", "https://a.example/", "http://egress:3128", false},
		{"env", "https://internal.example/", "", false},
		{"env", "http://a.example/", "", false}, // HTTP_PROXY unset
		{"https://p:3128", "", "", true},
		{"http://p", "", "", true},
		{"socks5://p:1080", "", "", true},
		{"http://user:hunter2@p:3128/x", "", "", true},
	} {
		f, err := dispatch.ParseProxy(c.value, getenv)
		if c.err {
			if err == nil {
				t.Errorf("ParseProxy(%q): no error", c.value)
			} else if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("ParseProxy(%q): %v echoes the password", c.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseProxy(%q): %v", c.value, err)
			continue
		}
		got := ""
		if f != nil {
			tu, _ := url.Parse(c.target)
			u, err := f(tu)
			if err != nil {
				t.Errorf("ParseProxy(%q)(%s): %v", c.value, c.target, err)
			}
			if u != nil {
				got = u.String()
			}
		}
		if got != c.want {
			t.Errorf("ParseProxy(%q) for %s = %q, want %q", c.value, c.target, got, c.want)
		}
	}
}
