package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/apikey"
	"github.com/tokend/tokend/internal/dispatch"
	"github.com/tokend/tokend/token"
)

// TestWebhookPages: the console lists the tenant's endpoints and shows an
// endpoint's deliveries with every attempt; another tenant's operator gets
// a 404.
func TestWebhookPages(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	keys, err := token.NewKeyring(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer receiver.Close()
	ep, _, err := dispatch.Create(t.Context(), s.pool, keys, nil, tenant, dispatch.NewEndpoint{URL: receiver.URL + "/in"})
	if err != nil {
		t.Fatal(err)
	}
	s.issue(t, "ledger.credit")
	d, err := dispatch.New(dispatch.Config{Pool: s.pool, Keys: keys, BackoffBase: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, err := d.Round(context.Background()); err != nil || n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no delivery attempted")
		}
	}

	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if _, body := c.do(http.MethodGet, "/console/webhooks", nil, nil); !strings.Contains(body, ep.ID) || !strings.Contains(body, receiver.URL+"/in") {
		t.Errorf("webhooks page lacks %s:\n%s", ep.ID, body)
	}
	resp, body := c.do(http.MethodGet, "/console/webhooks/"+ep.ID, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<td class="delivery-state">pending</td>`) || !strings.Contains(body, "&#34;status&#34;: 503") {
		t.Errorf("endpoint page = %d, want its pending delivery and the 503 attempt:\n%s", resp.StatusCode, body)
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
