package dispatch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/webhook"
)

// TestAnswerHeadersAreBounded: an endpoint answering with headers over
// 64 KiB gets a failed attempt; the sender does not read them (net/http's
// default would read 1 MiB, and more with each header line).
func TestAnswerHeadersAreBounded(t *testing.T) {
	t.Parallel()
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 100 {
			w.Header().Set("X-Pad-"+strings.Repeat("p", 3)+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("v", 1<<10))
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer rec.Close()
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pad", strings.Repeat("v", 32<<10))
	}))
	defer small.Close()
	s := newSender(5*time.Second, policy{nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil, nil, nil)
	if _, err := s.send(context.Background(), rec.URL, http.Header{}, []byte(`{}`)); err == nil {
		t.Fatal("100 KiB of answer headers read: want a failed attempt")
	}
	if a, err := s.send(context.Background(), small.URL, http.Header{}, []byte(`{}`)); err != nil || a.status != http.StatusOK {
		t.Fatalf("32 KiB of answer headers: %v %v, want 200", a, err)
	}
}

// TestDeliveryBodiesAreNotHTMLEscaped: an outcome holding <, > and & is
// sent as stored, not as \u003c... (six times its size).
func TestDeliveryBodiesAreNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	b, err := encodeBody(webhook.Delivery{Type: "token.spend", Data: webhook.Event{Outcome: json.RawMessage(`{"note":"<b>a & b</b>"}`)}})
	if err != nil || !strings.Contains(string(b), `"<b>a & b</b>"`) || strings.HasSuffix(string(b), "\n") {
		t.Fatalf("%s %v", b, err)
	}
}
