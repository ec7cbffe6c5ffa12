package console_test

import (
	"context"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// failingEndpoint registers an endpoint of tenant whose receiver answers 503,
// issues a token so that an event is owed to it, and runs the dispatcher
// until rounds attempts were made. With maxAge set, the delivery fails for
// good at its first attempt.
// loopback lets deliveries reach the test's receiver: tokend refuses loopback
// unless the server's operator allows it.
var loopback = []string{"127.0.0.1"}

func (s *server) failingEndpoint(t *testing.T, rounds int, maxAge time.Duration) dispatch.Endpoint {
	t.Helper()
	keys, err := token.NewKeyring(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(receiver.Close)
	ep, _, err := dispatch.Create(t.Context(), s.pool, keys, loopback, tenant, dispatch.NewEndpoint{URL: receiver.URL + "/in"})
	if err != nil {
		t.Fatal(err)
	}
	s.issue(t, "ledger.credit")
	d, err := dispatch.New(dispatch.Config{Pool: s.pool, Keys: keys, AllowedHosts: loopback, BackoffBase: time.Nanosecond, BackoffMax: time.Millisecond,
		MaxAge: maxAge, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for made, deadline := 0, time.Now().Add(pgtest.SettleTimeout); made < rounds; time.Sleep(5 * time.Millisecond) {
		n, err := d.Round(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		made += n
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d delivery attempts made", made, rounds)
		}
	}
	return ep
}

// TestWebhookPages: the console lists the tenant's endpoints and shows an
// endpoint's deliveries with every attempt as a line of its own (status,
// time, duration), and says that it is failing; another tenant's operator
// gets a 404.
func TestWebhookPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ep := s.failingEndpoint(t, 2, 0)

	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if _, body := c.do(http.MethodGet, "/console/webhooks", nil, nil); !strings.Contains(body, ep.ID) || !strings.Contains(body, ep.URL) ||
		!strings.Contains(body, `<span class="badge state-failing">failing</span>`) {
		t.Errorf("webhooks page lacks %s, failing:\n%s", ep.ID, body)
	}
	resp, body := c.do(http.MethodGet, "/console/webhooks/"+ep.ID, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `delivery-state">pending</span>`) || strings.Count(body, `<b class="status">HTTP 503</b>`) != 2 {
		t.Errorf("endpoint page = %d, want its pending delivery and its two 503 attempts:\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `id="enabled">failing</span>`) || !strings.Contains(body, `id="failing"`) || strings.Contains(body, "&#34;status&#34;") {
		t.Errorf("endpoint page does not say it is failing, or shows raw attempts:\n%s", body)
	}

	other := &client{t: t, s: s}
	other.signIn(createKey(t, s.pool, "acme", apikey.Operator))
	if resp, _ := other.do(http.MethodGet, "/console/webhooks/"+ep.ID, nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's operator: %d, want 404", resp.StatusCode)
	}
	if _, body := other.do(http.MethodGet, "/console/webhooks", nil, nil); strings.Contains(body, ep.ID) {
		t.Error("another tenant's operator sees the endpoint")
	}
}

// TestWebhookActions: an operator disables and enables an endpoint and
// sends its failed deliveries again from its page; each needs the session's
// CSRF token, and another tenant's operator changes nothing.
func TestWebhookActions(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ep := s.failingEndpoint(t, 1, time.Nanosecond)
	enabled := func() bool {
		var on bool
		if err := s.pool.QueryRow(t.Context(), `SELECT enabled FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	count := func(state string) int {
		var n int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND state = $2`, ep.ID, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("failed"); n != 1 {
		t.Fatalf("%d failed deliveries, want 1", n)
	}

	other := &client{t: t, s: s}
	other.signIn(createKey(t, s.pool, "acme", apikey.Operator))
	if resp, _ := other.do(http.MethodPost, "/console/webhooks/"+ep.ID+"/disable", other.sameOrigin(), url.Values{"csrf": {other.csrf()}}); resp.StatusCode != http.StatusNotFound || !enabled() {
		t.Errorf("another tenant's disable: %d, enabled %v; want 404 and still enabled", resp.StatusCode, enabled())
	}

	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if resp, _ := c.do(http.MethodPost, "/console/webhooks/"+ep.ID+"/disable", c.sameOrigin(), url.Values{"csrf": {"forged"}}); resp.StatusCode < 400 || !enabled() {
		t.Errorf("disable without the CSRF token: %d, enabled %v; want refused", resp.StatusCode, enabled())
	}
	csrf := url.Values{"csrf": {c.csrf()}}
	steps := []struct {
		action, done string
		enabled      bool
	}{
		{"disable", "Disabled.", false},
		{"enable", "Enabled.", true},
		{"redeliver", "Sending 1 delivery now.", true},
	}
	for _, st := range steps {
		resp, _ := c.do(http.MethodPost, "/console/webhooks/"+ep.ID+"/"+st.action, c.sameOrigin(), csrf)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: %d, want 303", st.action, resp.StatusCode)
		}
		_, body := c.do(http.MethodGet, resp.Header.Get("Location"), nil, nil)
		if !strings.Contains(body, st.done) || enabled() != st.enabled {
			t.Errorf("after %s: enabled %v, page lacks %q:\n%s", st.action, enabled(), st.done, body)
		}
	}
	if failed, pending := count("failed"), count("pending"); failed != 0 || pending != 1 {
		t.Errorf("after redeliver: %d failed, %d pending deliveries; want 0 and 1", failed, pending)
	}

	// With every delivery made, the button sends nothing and says so,
	// instead of reporting a success.
	if _, err := s.pool.Exec(t.Context(), `UPDATE webhook_deliveries SET state = 'delivered', finished_at = now() WHERE endpoint_id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	resp, _ := c.do(http.MethodPost, "/console/webhooks/"+ep.ID+"/redeliver", c.sameOrigin(), csrf)
	_, body := c.do(http.MethodGet, resp.Header.Get("Location"), nil, nil)
	if !strings.Contains(body, "Nothing to send") || strings.Contains(body, "Sending") {
		t.Errorf("redeliver with nothing owed: the page does not say nothing was sent:\n%s", body)
	}
}

// TestWebhookRotateSecret: the console's rotation shows the new secret once,
// on its answer, and it is the secret deliveries are signed with from then
// on; the previous one keeps signing beside it for the overlap.
func TestWebhookRotateSecret(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *console.Config) { c.SecretOverlap = time.Hour })
	ep := s.failingEndpoint(t, 1, time.Nanosecond)
	keys, err := token.NewKeyring(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	old, err := ep.Secret(keys)
	if err != nil {
		t.Fatal(err)
	}
	path := "/console/webhooks/" + ep.ID + "/rotate-secret"

	other := &client{t: t, s: s}
	other.signIn(createKey(t, s.pool, "acme", apikey.Operator))
	if resp, _ := other.do(http.MethodPost, path, other.sameOrigin(), url.Values{"csrf": {other.csrf()}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's rotation: %d, want 404", resp.StatusCode)
	}
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if resp, _ := c.do(http.MethodPost, path, c.sameOrigin(), url.Values{"csrf": {"forged"}}); resp.StatusCode < 400 {
		t.Errorf("rotation without the CSRF token: %d, want refused", resp.StatusCode)
	}
	if now, err := dispatch.Get(t.Context(), s.pool, tenant, ep.ID); err != nil || now.PreviousSecretUntil != nil {
		t.Fatalf("refused rotations rotated: %+v, %v", now, err)
	}

	resp, page := c.do(http.MethodPost, path, c.sameOrigin(), url.Values{"csrf": {c.csrf()}})
	body := html.UnescapeString(page)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" {
		t.Fatalf("rotation: %d (Location %q), want 200 with the secret on the page", resp.StatusCode, resp.Header.Get("Location"))
	}
	now, err := dispatch.Get(t.Context(), s.pool, tenant, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	next, err := now.Secret(keys)
	if err != nil {
		t.Fatal(err)
	}
	if next == old || !strings.Contains(body, next) || strings.Contains(body, old) {
		t.Errorf("the page does not show the new secret alone (new %q, old %q):\n%s", next, old, body)
	}
	if now.PreviousSecretUntil == nil || time.Until(*now.PreviousSecretUntil) < 50*time.Minute {
		t.Errorf("previous secret signs until %v, want about an hour from now (SecretOverlap)", now.PreviousSecretUntil)
	}
	if _, page := c.do(http.MethodGet, "/console/webhooks/"+ep.ID, nil, nil); strings.Contains(html.UnescapeString(page), next) || !strings.Contains(page, `id="previous-secret"`) {
		t.Errorf("the endpoint's page shows the secret again, or not the overlap:\n%s", page)
	}
}

// TestWebhookRotateDoubleClick: the rotate form carries an Idempotency-Key
// made for its page, so posting it twice (a double click) shows the same
// new secret twice and rotates once: the secret shown keeps signing.
func TestWebhookRotateDoubleClick(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *console.Config) { c.SecretOverlap = time.Hour })
	ep := s.failingEndpoint(t, 1, time.Nanosecond)
	keys, err := token.NewKeyring(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	_, page := c.do(http.MethodGet, "/console/webhooks/"+ep.ID, nil, nil)
	m := regexp.MustCompile(`name="idempotency_key" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("the rotate form has no idempotency_key:\n%s", page)
	}
	form := url.Values{"csrf": {c.csrf()}, "idempotency_key": {m[1]}}
	path := "/console/webhooks/" + ep.ID + "/rotate-secret"
	var shown []string
	for range 2 {
		resp, page := c.do(http.MethodPost, path, c.sameOrigin(), form)
		secret := regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`).FindString(html.UnescapeString(page))
		if resp.StatusCode != http.StatusOK || secret == "" {
			t.Fatalf("rotation: %d without a secret", resp.StatusCode)
		}
		shown = append(shown, secret)
	}
	now, err := dispatch.Get(t.Context(), s.pool, ep.Tenant, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	current, err := now.Secret(keys)
	if err != nil {
		t.Fatal(err)
	}
	if shown[0] != shown[1] || shown[0] != current {
		t.Fatalf("double click showed %q then %q; the endpoint signs with %q", shown[0], shown[1], current)
	}
}

// TestConsoleSharesTheKeysRateLimit: every signed-in request of the console
// takes from the rate of the API key it was signed in with (Config.Allow,
// the API's limiter in tokend serve), and is refused with 429 and
// Retry-After, doing no database work, once that is spent.
func TestConsoleSharesTheKeysRateLimit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	taken := map[string]int{}
	s := newServer(t, func(c *console.Config) {
		c.Allow = func(_ context.Context, keyID string) (bool, time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			taken[keyID]++
			return taken[keyID] <= 3, 1500 * time.Millisecond
		}
	})
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	codes := []int{}
	var retry string
	for range 6 {
		resp, _ := c.do(http.MethodGet, "/console/webhooks", nil, nil)
		codes = append(codes, resp.StatusCode)
		retry = resp.Header.Get("Retry-After")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(taken) != 1 || codes[0] != http.StatusOK || codes[5] != http.StatusTooManyRequests || retry != "2" {
		t.Fatalf("codes %v, Retry-After %q, taken %v: want 200s then 429 with Retry-After 2, from the session's key", codes, retry, taken)
	}
}
