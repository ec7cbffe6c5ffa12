package demo_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/testkit/browsertest"
)

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// signIn opens the demo in tab, signs in as name and waits for the top-up form.
func signIn(tab *browsertest.Tab, s *server, name string) {
	tab.Do(chromedp.Navigate(s.URL+"/demo/"), chromedp.WaitVisible(css("#name")))
	tab.Shot("signin")
	tab.Do(
		chromedp.SendKeys(css("#name"), name),
		chromedp.Click(css("main button")),
		chromedp.WaitVisible(css("#topup")),
	)
}

// submit fills in the amount and sends the form.
func submit(tab *browsertest.Tab, amount string) {
	tab.Do(chromedp.SetValue(css("#amount"), amount), chromedp.Click(css("#submit")))
}

// The second submit of a double click reaches the server while the first is
// running: one credit, and both are answered with the same confirmation.
func TestDoubleClick(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	s := newServer(t, g.hold)
	tab := browsertest.New(t).Tab("user")
	tab.DisableScripts() // the server alone must stop the second submit
	signIn(tab, s, "alice")

	tab.Do(chromedp.SetValue(css("#amount"), "25"))
	click := tab.ClickAt("#submit")
	tab.Do(click)
	g.arrived(t, 1)
	tab.Do(click) // the page is still the form: the first submit is held
	g.arrived(t, 2)
	close(g.release)
	answers := []answer{g.answer(t), g.answer(t)}
	tab.Do(chromedp.WaitVisible(css("#confirmation")))

	for i, a := range answers {
		if a.status != http.StatusOK || confirmation(a.body) == "" || confirmation(a.body) != confirmation(answers[0].body) {
			t.Errorf("answer %d = %d, confirmation %q; want 200 and the same confirmation as answer 0, %q",
				i, a.status, confirmation(a.body), confirmation(answers[0].body))
		}
	}
	if replays := strings.Count(answers[0].body+answers[1].body, `id="replayed"`); replays != 1 {
		t.Errorf("%d of the two answers say the form was already sent, want 1", replays)
	}
	if got := tab.Text("#balance"); got != "25" {
		t.Errorf("the page shows balance %s, want 25", got)
	}
	if entries, balance := s.effects(t, "alice"); entries != 1 || balance != 25 {
		t.Errorf("%d ledger entries, balance %d; want 1, 25", entries, balance)
	}
}

// With JavaScript on, the page's script disables the button after the first
// click, so the second click of a double click sends nothing.
func TestScriptDisablesButton(t *testing.T) {
	t.Parallel()
	g := newGate(t)
	s := newServer(t, g.hold)
	tab := browsertest.New(t).Tab("user")
	signIn(tab, s, "alice")

	tab.Do(chromedp.SetValue(css("#amount"), "5"))
	click := tab.ClickAt("#submit")
	tab.Do(click)
	g.arrived(t, 1)
	tab.Do(click)
	close(g.release)
	g.answer(t)
	tab.Do(chromedp.WaitVisible(css("#confirmation")))
	// Had the second click sent the form, that submit would have reached
	// the server before the page that shows the confirmation: a browser
	// shows the answer to the last submit it started.
	if n := g.n.Load(); n != 1 {
		t.Errorf("%d submits reached the server, want 1", n)
	}
}

// Sending the same rendering again, by Back and submit or by reloading the
// result page, shows the first submit's confirmation; one credit.
func TestResubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		scripts bool
		again   func(t *testing.T, tab *browsertest.Tab, field string)
	}{
		{"back and submit", false, backAndSubmit},
		{"back and submit, script on", true, backAndSubmit},
		{"reload the result", false, func(t *testing.T, tab *browsertest.Tab, _ string) {
			tab.Do(chromedp.Reload())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t)
			tab := browsertest.New(t).Tab("user")
			if !tt.scripts {
				tab.DisableScripts()
			}
			signIn(tab, s, "alice")
			tab.Shot("topup")
			field := tab.Value(`input[name="tokend_token"]`)
			submit(tab, "10")
			tab.Do(chromedp.WaitVisible(css("#confirmation")))
			tab.Shot("confirmation")
			receipt := tab.Text("#receipt")

			tt.again(t, tab, field)
			tab.Do(chromedp.WaitVisible(css("#replayed")))
			tab.Shot("replayed")
			if got := tab.Text("#receipt"); got != receipt {
				t.Errorf("resubmit shows receipt %s, want the first submit's %s", got, receipt)
			}
			if got := tab.Text("#balance"); got != "10" {
				t.Errorf("resubmit shows balance %s, want 10", got)
			}
			if entries, balance := s.effects(t, "alice"); entries != 1 || balance != 10 {
				t.Errorf("%d ledger entries, balance %d; want 1, 10", entries, balance)
			}
		})
	}
}

// backAndSubmit goes Back to the form, checks it is the same rendering and
// sends it again.
func backAndSubmit(t *testing.T, tab *browsertest.Tab, field string) {
	t.Helper()
	tab.Do(chromedp.NavigateBack(), chromedp.WaitVisible(css("#topup")))
	if got := tab.Value(`input[name="tokend_token"]`); got != field {
		t.Fatal("Back showed a new rendering of the form; a submit of it would be a new top-up")
	}
	tab.Do(chromedp.Click(css("#submit")))
}

// Two tabs are two renderings: both credit, and each replays its own.
func TestTwoTabs(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	b := browsertest.New(t)
	tabs := []*browsertest.Tab{b.Tab("first"), b.Tab("second")}
	signIn(tabs[0], s, "alice")
	tabs[1].Do(chromedp.Navigate(s.URL+"/demo/topup"), chromedp.WaitVisible(css("#topup")))

	var receipts []string
	for i, amount := range []string{"2", "3"} {
		submit(tabs[i], amount)
		tabs[i].Do(chromedp.WaitVisible(css("#confirmation")))
		receipts = append(receipts, tabs[i].Text("#receipt"))
	}
	if receipts[0] == receipts[1] {
		t.Fatalf("both tabs show receipt %s, want two top-ups", receipts[0])
	}
	if got := tabs[1].Text("#balance"); got != "5" {
		t.Errorf("the second tab shows balance %s, want 5", got)
	}
	for i, tab := range tabs {
		tab.Do(chromedp.NavigateBack(), chromedp.WaitVisible(css("#topup")), chromedp.Click(css("#submit")), chromedp.WaitVisible(css("#replayed")))
		if got := tab.Text("#receipt"); got != receipts[i] {
			t.Errorf("tab %d resubmitted shows receipt %s, want its own %s", i, got, receipts[i])
		}
	}
	if entries, balance := s.effects(t, "alice"); entries != 2 || balance != 5 {
		t.Errorf("%d ledger entries, balance %d; want 2, 5", entries, balance)
	}
}

// An expired form is refused with a message and a fresh form, which works.
func TestExpiredForm(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	tab := browsertest.New(t).Tab("user")
	tab.DisableScripts()
	signIn(tab, s, "alice")
	field := tab.Value(`input[name="tokend_token"]`)
	s.expire(t, field)

	submit(tab, "10")
	tab.Do(chromedp.WaitVisible(css("#problem")))
	tab.Shot("expired")
	if msg := tab.Text("#problem"); !strings.Contains(msg, "expired") || !strings.Contains(msg, "nothing was done") {
		t.Errorf("message %q, want that the form expired and nothing was done", msg)
	}
	if fresh := tab.Value(`input[name="tokend_token"]`); fresh == field || fresh == "" {
		t.Error("the form shown after the refusal is not a fresh rendering")
	}
	if entries, _ := s.effects(t, "alice"); entries != 0 {
		t.Errorf("expired form: %d ledger entries, want 0", entries)
	}

	tab.Do(chromedp.Click(css("#submit")), chromedp.WaitVisible(css("#confirmation")))
	if entries, balance := s.effects(t, "alice"); entries != 1 || balance != 10 {
		t.Errorf("fresh form: %d ledger entries, balance %d; want 1, 10", entries, balance)
	}
}

// confirmation returns the confirmation part of a result page.
func confirmation(page string) string {
	_, after, ok := strings.Cut(page, `<div id="confirmation">`)
	if !ok {
		return ""
	}
	inner, _, _ := strings.Cut(after, `</div>`)
	return inner
}

// gate holds the first submit of the top-up form until a second one
// arrives, so that the two submits of a double click are at the server
// together, as when the first one is slow. It records each one's answer.
type gate struct {
	ctx      context.Context
	n        atomic.Int32
	arrivals chan int32
	release  chan struct{}
	answers  chan answer
}

type answer struct {
	status int
	body   string
}

func newGate(t *testing.T) *gate {
	return &gate{ctx: t.Context(), arrivals: make(chan int32, 8), release: make(chan struct{}), answers: make(chan answer, 8)}
}

func (g *gate) hold(c *gin.Context) {
	if c.Request.Method != http.MethodPost || c.Request.URL.Path != "/demo/topup/send" {
		return
	}
	n := g.n.Add(1)
	g.arrivals <- n
	if n == 1 {
		select {
		case <-g.release:
		case <-g.ctx.Done():
		}
	}
	w := &recorder{ResponseWriter: c.Writer}
	c.Writer = w
	c.Next()
	g.answers <- answer{status: w.Status(), body: w.body.String()}
}

// arrived waits for submit n to reach the server.
func (g *gate) arrived(t *testing.T, n int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(g.ctx, browsertest.Timeout)
	defer cancel()
	select {
	case got := <-g.arrivals:
		if got != n {
			t.Fatalf("submit %d arrived, want %d", got, n)
		}
	case <-ctx.Done():
		t.Fatalf("submit %d never reached the server", n)
	}
}

// answer waits for the next answer to a held submit.
func (g *gate) answer(t *testing.T) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(g.ctx, browsertest.Timeout)
	defer cancel()
	select {
	case a := <-g.answers:
		return a
	case <-ctx.Done():
		t.Fatal("a submit was never answered")
		return answer{}
	}
}

// recorder keeps a copy of what it writes.
type recorder struct {
	gin.ResponseWriter
	body bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) WriteString(s string) (int, error) {
	r.body.WriteString(s)
	return r.ResponseWriter.WriteString(s)
}
