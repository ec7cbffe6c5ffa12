package console_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/browsertest"
	"github.com/tokend/tokend/token"
)

// TestPagesFitTheWindow opens every page of the console, and the index at
// /, in a phone's 390 px and a desktop's 1,280 px, with long subjects, many
// tokens and a failing webhook endpoint, and checks that no page is wider
// than its window (a table scrolls inside its card) and that the header's
// tenant and Sign out stay in view. The screenshots are kept under
// artifacts/browser/TestPagesFitTheWindow/.
func TestPagesFitTheWindow(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	long := "someone.with.a.very.long.address+console-layout-check@subdomain.example.com"
	for range 12 {
		if _, err := s.issuer.Issue(t.Context(), s.pool, intent.Request{
			Tenant: tenant, Operation: "ledger.credit", IntentID: "checkout-" + token.NewID() + "-" + long, Subject: long, TTLSeconds: 600, Actor: "test",
		}); err != nil {
			t.Fatal(err)
		}
	}
	spent := s.issue(t, "ledger.credit")
	if _, err := s.spender.Spend(t.Context(), s.pool, consume.Request{Tenant: tenant, Secret: spent.Secret, Operation: "ledger.credit", Subject: "alice",
		Payload: []byte(`{"account":"alice.long-account-name-to-see-how-the-stored-outcome-wraps","amount":5}`), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ep := s.failingEndpoint(t, 3, time.Hour)

	pages := []struct{ name, path, ready string }{
		{"index", "/", "#index"},
		{"tokens", "/console/tokens?state=all", "#tokens"},
		{"token", "/console/tokens/" + spent.Token.ID, "#timeline"},
		{"webhooks", "/console/webhooks", "#webhooks"},
		{"webhook", "/console/webhooks/" + ep.ID, "#deliveries .attempt"},
	}
	windows := []struct {
		width, height int64
		mobile        bool
	}{{390, 844, true}, {1280, 800, false}}
	for _, w := range windows {
		tab := browsertest.New(t).Tab(fmt.Sprint(w.width))
		tab.Viewport(w.width, w.height, w.mobile)
		signIn(tab, s, s.operatorKey)
		for _, p := range pages {
			tab.Do(chromedp.Navigate(s.URL+p.path), chromedp.WaitVisible(css(p.ready)))
			tab.Keep(fmt.Sprintf("%d-%s", w.width, p.name))
			if o := tab.PageOverflow(); o.ScrollWidth > o.ClientWidth || o.ClientWidth != w.width {
				t.Errorf("%s at %d px: the page is %d px wide in a %d px window; %s sticks out", p.name, w.width, o.ScrollWidth, o.ClientWidth, o.Widest)
			}
			if p.name == "index" {
				continue
			}
			for _, sel := range []string{"#tenant", ".signout button"} {
				right := browsertest.Run(tab, chromedp.Evaluate[float64](`document.querySelector("`+sel+`").getBoundingClientRect().right`))
				if right > float64(w.width) {
					t.Errorf("%s at %d px: the header's %s ends at %.0f px, out of the window", p.name, w.width, sel, right)
				}
			}
		}
	}
}

// TestTokenSearch: the list finds tokens by subject and by intent ID within
// the tab shown, and a token's ID leads to its page.
func TestTokenSearch(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	alice := s.issue(t, "ledger.credit")
	bob, err := s.issuer.Issue(t.Context(), s.pool, intent.Request{Tenant: tenant, Operation: "ledger.credit", IntentID: "order-77", Subject: "bob", TTLSeconds: 600, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	tests := []struct {
		query    string
		want     []string
		notWant  []string
		location string // for a redirect
	}{
		{"q=bob", []string{bob.Token.ID}, []string{alice.Token.ID}, ""},
		{"q=order-77", []string{bob.Token.ID}, []string{alice.Token.ID}, ""},
		{"q=alice&state=issued", []string{alice.Token.ID}, []string{bob.Token.ID}, ""},
		{"q=alice&state=consumed", []string{"No consumed token has the ID, subject or intent ID"}, []string{alice.Token.ID}, ""},
		{"q=" + alice.Token.ID, nil, nil, "/console/tokens/" + alice.Token.ID},
		{"q=%25", []string{"No token has"}, []string{alice.Token.ID, bob.Token.ID}, ""},
	}
	for _, tt := range tests {
		resp, body := c.do("GET", "/console/tokens?"+tt.query, nil, nil)
		if tt.location != "" {
			if resp.StatusCode != 303 || resp.Header.Get("Location") != tt.location {
				t.Errorf("%s: %d to %q, want 303 to %s", tt.query, resp.StatusCode, resp.Header.Get("Location"), tt.location)
			}
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the page lacks %s", tt.query, w)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(body, w) {
				t.Errorf("%s: the page shows %s", tt.query, w)
			}
		}
	}
}

// TestLandingTab: signing in lands on the unknown tokens while one waits for
// an operator, and on all tokens otherwise.
func TestLandingTab(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	issued := s.issue(t, "ledger.credit")
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if _, body := c.do("GET", "/console/tokens", nil, nil); !strings.Contains(body, `id="tab-all" class="state-all current"`) || !strings.Contains(body, issued.Token.ID) {
		t.Errorf("with no unknown token the list does not land on all, with the issued token:\n%s", body)
	}
	unknown := s.unknown(t)
	if _, body := c.do("GET", "/console/tokens", nil, nil); !strings.Contains(body, `id="tab-unknown" class="state-unknown current"`) || !strings.Contains(body, unknown.Token.ID) || strings.Contains(body, issued.Token.ID) {
		t.Errorf("with an unknown token the list does not land on unknown:\n%s", body)
	}
}
