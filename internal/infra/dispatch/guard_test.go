package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// loopbackOnly is a test's last word before any connection: an address the
// dialer allowed is connected to only when it is on loopback, so that even
// a broken check never sends a test's traffic off this machine.
func loopbackOnly(seen *sync.Map) func(string, error) error {
	return func(address string, verdict error) error {
		seen.Store(address, verdict)
		if verdict != nil {
			return verdict
		}
		if ap, err := netip.ParseAddrPort(address); err != nil || !ap.Addr().Unmap().IsLoopback() {
			return fmt.Errorf("test: would have connected to %s", address)
		}
		return nil
	}
}

// resolveTo is a resolver that answers every name with addr, as a name an
// attacker controls would, and as some resolvers read 2130706433 or
// 0177.0.0.1; no test asks a DNS server.
func resolveTo(addr string) func(context.Context, string) ([]netip.Addr, error) {
	return func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr(addr)}, nil
	}
}

// TestLoopbackReceivesNothingFromAnySpelling: a receiver on loopback gets
// no delivery from an endpoint naming it in any form: registration refuses
// the forms the URL alone shows, and endpoints registered anyway (under an
// allow-list since emptied, or a name that resolved elsewhere then) are
// refused in the dialer, with nothing about the target in what the tenant
// reads back.
func TestLoopbackReceivesNothingFromAnySpelling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	hosts := []string{"127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "[::ffff:127.0.0.1]",
		"[::ffff:7f00:1]", "localhost", "localhost.", "LOCALHOST", "a.localhost", "[::1]", "[0:0:0:0:0:0:0:1]", "inward.test", "0.0.0.0"}
	var names []string
	for _, h := range hosts {
		u := "http://" + h + ":" + port + "/hook"
		_, _, err := dispatch.Create(ctx, pool, keys, nil, "a", dispatch.NewEndpoint{URL: u})
		if h == "inward.test" { // a name: judged at each attempt by what it resolves to
			if err != nil {
				t.Errorf("Create(%s) = %v, want it registered", u, err)
			}
			continue
		}
		if !errors.Is(err, dispatch.ErrHostNotAllowed) && !errors.Is(err, dispatch.ErrInvalidRequest) {
			t.Errorf("Create(%s) = %v, want it refused", u, err)
		}
		names = append(names, strings.Trim(h, "[]"))
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints`); n != 1 {
		t.Fatalf("%d endpoints registered, want only inward.test", n)
	}
	// The same endpoints, registered while the server's operator allowed them.
	for _, h := range hosts[:len(hosts)-1] {
		if _, _, err := dispatch.Create(ctx, pool, keys, names, "a", dispatch.NewEndpoint{URL: "http://" + h + ":" + port + "/hook"}); err != nil {
			t.Fatalf("Create(%s) under %v: %v", h, names, err)
		}
	}
	writeEvents(t, pool, "a", 1)

	var seen sync.Map
	cfg := dispatch.WithTestNetwork(dispatch.Config{Pool: pool, Keys: keys, BackoffBase: 3600e9, Logger: slog.New(slog.DiscardHandler)},
		resolveTo("127.0.0.1"), loopbackOnly(&seen))
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eps := int64(len(hosts))
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_attempts`) == eps
	})
	if hits.Load() != 0 {
		t.Errorf("the loopback receiver got %d deliveries", hits.Load())
	}
	rows, err := pool.Query(ctx, `SELECT w.url, a.status, coalesce(a.error, ''), a.duration_ms FROM webhook_attempts a JOIN webhook_endpoints w ON w.tenant_id = a.tenant_id AND w.id = a.endpoint_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var u, msg string
		var status *int
		var ms int
		if err := rows.Scan(&u, &status, &msg, &ms); err != nil {
			t.Fatal(err)
		}
		if status != nil || msg != dispatch.AttemptNotAllowed || ms != 0 {
			t.Errorf("%s: attempt read back as status %v, error %q, %d ms; want only %q", u, status, msg, ms, dispatch.AttemptNotAllowed)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`); n != eps {
		t.Errorf("%d deliveries pending, want %d: a refused attempt is a failed one", n, eps)
	}
	seen.Range(func(k, v any) bool {
		if v == nil {
			t.Errorf("the dialer allowed %v", k)
		}
		return true
	})
}

// TestForbiddenAddressesRefusedBeforeConnecting: the dialer's check refuses
// every forbidden range, however spelled, before a connection is made; a
// name resolving there is refused on the address dialed. No test connects
// to any of them: an allowed address off loopback stops at the test's guard.
func TestForbiddenAddressesRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	forbidden := []string{"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1",
		"100.127.255.254", "127.0.0.1", "127.255.255.254", "0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "255.255.255.255",
		"240.0.0.1", "198.18.0.1", "198.19.255.1", "192.0.2.1", "198.51.100.1", "203.0.113.1", "192.0.0.8", "192.88.99.1",
		"::", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1", "fc00::1", "fd12:3456::1",
		"fe80::1", "fec0::1", "ff02::1", "ff05::2", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "2001::1", "2001:db8::1", "100::1"}
	for _, a := range forbidden {
		address := net.JoinHostPort(a, "443")
		if err := dispatch.Control(nil, address); !errors.Is(err, dispatch.ErrAddressNotAllowed) {
			t.Errorf("Control(%s) = %v, want refused", address, err)
		}
	}
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:93.184.216.34"} {
		if err := dispatch.Control(nil, net.JoinHostPort(a, "443")); err != nil {
			t.Errorf("Control(%s) = %v, want a public address allowed", a, err)
		}
	}
	// The server's operator allows a range, or a name whatever it resolves to.
	for _, c := range []struct {
		allowed []string
		address string
		want    error
	}{
		{[]string{"10.0.0.0/8"}, "10.1.2.3:80", nil},
		{[]string{"10.0.0.0/8"}, "10.255.0.1:80", nil},
		{[]string{"10.0.0.0/8"}, "192.168.1.1:80", dispatch.ErrAddressNotAllowed},
		{[]string{"10.0.0.0/8"}, "93.184.216.34:80", dispatch.ErrAddressNotAllowed}, // a list allows only what it lists
		{[]string{"127.0.0.1"}, "[::ffff:127.0.0.1]:80", nil},
		{[]string{"fd00::/8"}, "[fd12::1]:80", nil},
		{[]string{"hooks.internal"}, "10.1.2.3:80", dispatch.ErrAddressNotAllowed}, // allowed by name only when dialed by that name
	} {
		if err := dispatch.Control(c.allowed, c.address); !errors.Is(err, c.want) {
			t.Errorf("Control(%v, %s) = %v, want %v", c.allowed, c.address, err, c.want)
		}
	}

	// Through the dispatcher: names that resolve into each range.
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	ep, _, err := dispatch.Create(ctx, pool, keys, nil, "a", dispatch.NewEndpoint{URL: "https://inward.test/hook"})
	if err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 1)
	for _, a := range []string{"10.1.2.3", "169.254.169.254", "100.64.0.1", "fd00::1", "::ffff:192.168.0.1"} {
		var seen sync.Map
		cfg := dispatch.WithTestNetwork(dispatch.Config{Pool: pool, Keys: keys, Logger: slog.New(slog.DiscardHandler)},
			resolveTo(a), loopbackOnly(&seen))
		d, err := dispatch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := count(t, pool, `SELECT count(*) FROM webhook_attempts`)
		if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now()`); err != nil {
			t.Fatal(err)
		}
		until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_attempts`) > before })
		dialed := 0
		seen.Range(func(k, v any) bool {
			dialed++
			if verdict, _ := v.(error); !errors.Is(verdict, dispatch.ErrAddressNotAllowed) {
				t.Errorf("%s: the dialer answered %v for %v, want refused", a, v, k)
			}
			return true
		})
		if dialed == 0 {
			t.Errorf("%s: the dialer's check never ran", a)
		}
		var msg string
		if err := pool.QueryRow(ctx, `SELECT error FROM webhook_attempts WHERE endpoint_id = $1 ORDER BY at DESC LIMIT 1`, ep.ID).Scan(&msg); err != nil || msg != dispatch.AttemptNotAllowed {
			t.Errorf("%s: attempt error %q, %v", a, msg, err)
		}
	}
}

// TestAllowedTargetStillWorks: a receiver the server's operator allowed, by
// address, by CIDR or by name, gets its deliveries.
func TestAllowedTargetStillWorks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		allowed []string
		host    string
	}{
		{[]string{"127.0.0.1"}, "127.0.0.1"},
		{[]string{"127.0.0.0/8"}, "receiver.test"},
		{[]string{"receiver.test"}, "receiver.test"},
		{[]string{"Receiver.Test."}, "RECEIVER.test"},
	} {
		t.Run(strings.Join(c.allowed, ","), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			keys := keyring(t)
			cons := newConsumer(t, pool)
			u, _ := url.Parse(cons.srv.URL)
			_, secret, err := dispatch.Create(context.Background(), pool, keys, c.allowed, "a",
				dispatch.NewEndpoint{URL: "http://" + c.host + ":" + u.Port() + "/hook"})
			if err != nil {
				t.Fatal(err)
			}
			cons.secret.Store(secret)
			writeEvents(t, pool, "a", 3)
			var seen sync.Map
			d, err := dispatch.New(dispatch.WithTestNetwork(dispatch.Config{Pool: pool, Keys: keys, AllowedHosts: c.allowed,
				Logger: slog.New(slog.DiscardHandler)}, resolveTo("127.0.0.1"), loopbackOnly(&seen)))
			if err != nil {
				t.Fatal(err)
			}
			until(t, d, func() bool { return cons.effects() == 3 })
		})
	}
}

// TestCheckURL: what the URL alone shows is refused at registration.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url     string
		allowed []string
		want    error
	}{
		{"https://hooks.example/in", nil, nil},
		{"https://hooks.example:8443/in?x=1", nil, nil},
		{"http://93.184.216.34/in", nil, nil},
		{"http://[2606:4700:4700::1111]:8080/", nil, nil},
		{"http://hooks.example:1/", nil, nil},
		{"http://hooks.example:65535/", nil, nil},
		{"http://hooks.example:0/", nil, dispatch.ErrInvalidRequest},
		{"http://hooks.example:99999/", nil, dispatch.ErrInvalidRequest},
		{"http://hooks.example:65536/", nil, dispatch.ErrInvalidRequest},
		{"http://hooks.example:/", nil, dispatch.ErrInvalidRequest},
		{"http://hooks.example:080/", nil, dispatch.ErrInvalidRequest},
		{"http://hooks.example:-1/", nil, dispatch.ErrInvalidRequest},
		{"ftp://hooks.example/", nil, dispatch.ErrInvalidRequest},
		{"file:///etc/passwd", nil, dispatch.ErrInvalidRequest},
		{"gopher://hooks.example/", nil, dispatch.ErrInvalidRequest},
		{"javascript:alert(1)", nil, dispatch.ErrInvalidRequest},
		{"http:hooks.example", nil, dispatch.ErrInvalidRequest},
		{"//hooks.example/", nil, dispatch.ErrInvalidRequest},
		{"http://10.0.0.1/", nil, dispatch.ErrHostNotAllowed},
		{"http://169.254.169.254/latest/meta-data/", nil, dispatch.ErrHostNotAllowed},
		{"http://[fd00::1]/", nil, dispatch.ErrHostNotAllowed},
		{"http://[fe80::1%25eth0]/", nil, dispatch.ErrHostNotAllowed},
		{"http://[::ffff:a9fe:a9fe]/", nil, dispatch.ErrHostNotAllowed},
		{"http://100.64.0.1/", nil, dispatch.ErrHostNotAllowed},
		{"http://0/", nil, dispatch.ErrInvalidRequest},
		{"http://3232235777/", nil, dispatch.ErrInvalidRequest}, // 192.168.1.1
		{"http://0xa9fea9fe/", nil, dispatch.ErrInvalidRequest}, // 169.254.169.254
		{"http://hooks.example.1/", nil, dispatch.ErrInvalidRequest},
		{"http://10.0.0.1/", []string{"10.0.0.0/8"}, nil},
		{"http://hooks.internal/", []string{"hooks.internal"}, nil},
		{"http://other.internal/", []string{"hooks.internal"}, dispatch.ErrHostNotAllowed},
		{"http://other.internal/", []string{"hooks.internal", "10.0.0.0/8"}, nil}, // may resolve into the range: judged when dialed
		{"http://93.184.216.34/", []string{"10.0.0.0/8"}, dispatch.ErrHostNotAllowed},
	} {
		if err := dispatch.CheckURL(c.url, c.allowed); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckURL(%q, %v) = %v, want %v", c.url, c.allowed, err, c.want)
		}
	}
	for _, bad := range [][]string{{"http://x/"}, {"10.0.0.0/33"}, {"fe80::1%eth0"}, {"a b"}} {
		if err := dispatch.CheckAllowedHosts(bad); err == nil {
			t.Errorf("CheckAllowedHosts(%q) = nil, want an error", bad)
		}
	}
}
