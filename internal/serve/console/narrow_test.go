package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/browsertest"
	"github.com/tokend/tokend/token"
)

// cellBox is where a table cell is on the page, and what it shows.
type cellBox struct {
	Table, Label, Text    string
	Left, Right, W, H     float64
	Hidden                bool   // display none, visibility hidden, or under something else at its center
	Shown                 string // the label the cell shows before its text
	ScrollW, ScrollClient float64
}

// cellsJS measures every cell of every table on the page.
const cellsJS = `(() => {
	const out = [];
	for (const td of document.querySelectorAll("table td")) {
		const r = td.getBoundingClientRect(), cs = getComputedStyle(td);
		const x = Math.min(Math.max(r.left + r.width / 2, 0), innerWidth - 1), y = r.top + Math.min(r.height / 2, 8);
		td.scrollIntoView({block: "center"});
		const c = td.getBoundingClientRect();
		const at = document.elementFromPoint(Math.min(Math.max(c.left + 2 + (c.width - 4) / 2, 0), innerWidth - 1), c.top + Math.min(c.height / 2, 8));
		const box = td.closest(".scroll") || td.parentElement;
		out.push({Table: td.closest("table").id, Label: td.dataset.label || "", Text: td.innerText.trim(),
			Left: r.left, Right: r.right, W: r.width, H: r.height,
			Hidden: cs.display === "none" || cs.visibility === "hidden" || !(at && (td === at || td.contains(at))),
			Shown: getComputedStyle(td, "::before").content,
			ScrollW: box.scrollWidth, ScrollClient: box.clientWidth});
	}
	scrollTo(0, 0);
	return out;
})()`

// headerBox is how the header is laid out.
type headerBox struct {
	Text       string
	Lines      int // rows of its text: its leaf elements grouped by their top
	Height     float64
	LineHeight float64
}

const headerJS = `(() => {
	const h = document.querySelector("header");
	const tops = [];
	for (const el of h.querySelectorAll("a, b, code, button, .who")) {
		if (el.children.length && el.tagName !== "A" && !el.classList.contains("who")) continue;
		const r = el.getBoundingClientRect();
		if (r.width === 0 || r.height === 0) continue;
		if (!tops.some(t => Math.abs(t - r.top) < r.height / 2)) tops.push(r.top);
	}
	const cs = getComputedStyle(h);
	return {Text: h.innerText, Lines: tops.length,
		Height: h.clientHeight - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom),
		LineHeight: parseFloat(getComputedStyle(document.documentElement).lineHeight)};
})()`

// TestNarrowScreenShowsEveryColumn opens the token list, the webhook list
// and a failing endpoint's page on a phone (390 x 844) and checks that every
// table cell is inside the window and visible, with its column's name
// shown before it (the rows stack: at 390 px the tables showed 2 of their
// columns, and a webhook's failing state was off-screen), and that the
// header takes at most 2 lines and ends in no stray separator (it took 4
// and ended in "·"). The screenshots are kept under
// artifacts/browser/TestNarrowScreenShowsEveryColumn/.
func TestNarrowScreenShowsEveryColumn(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	long := "someone.with.a.very.long.address+narrow-screen-check@subdomain.example.com"
	for range 3 {
		if _, err := s.issuer.Issue(t.Context(), s.pool, intent.Request{
			Tenant: tenant, Operation: "ledger.credit", IntentID: "narrow-" + token.NewID(), Subject: long, TTLSeconds: 600, Actor: "test",
		}); err != nil {
			t.Fatal(err)
		}
	}
	ep := s.failingEndpoint(t, 2, time.Hour)

	const width, height = 390, 844
	tab := browsertest.New(t).Tab("phone")
	tab.Viewport(width, height, true)
	signIn(tab, s, s.operatorKey)
	pages := []struct {
		name, path, ready string
		columns           int // cells per row, 0 for a page without a table
	}{
		{"tokens", "/console/tokens?state=all", "#tokens", 6},
		{"webhooks", "/console/webhooks", "#webhooks", 5},
		{"webhook", "/console/webhooks/" + ep.ID, "#deliveries .attempt", 0},
	}
	for _, p := range pages {
		tab.Do(chromedp.Navigate(s.URL+p.path), chromedp.WaitVisible(css(p.ready)))
		tab.Keep(p.name)

		cells := browsertest.Run(tab, chromedp.Evaluate[[]cellBox](cellsJS))
		if p.columns > 0 && (len(cells) == 0 || len(cells)%p.columns != 0) {
			t.Errorf("%s: %d cells, want rows of %d", p.name, len(cells), p.columns)
		}
		for _, c := range cells {
			where := p.name + " " + c.Table + " " + c.Label + " " + strings.Join(strings.Fields(c.Text), " ")
			switch {
			case c.Label == "":
				t.Errorf("%s: a cell without data-label", where)
			case c.W <= 0 || c.H <= 0 || c.Hidden:
				t.Errorf("%s: the cell is not visible (%.0f x %.0f, hidden %v)", where, c.W, c.H, c.Hidden)
			case c.Left < 0 || c.Right > width:
				t.Errorf("%s: the cell spans %.0f to %.0f px, outside the %d px window", where, c.Left, c.Right, width)
			case c.ScrollW > c.ScrollClient:
				t.Errorf("%s: its table scrolls sideways (%.0f px in %.0f)", where, c.ScrollW, c.ScrollClient)
			case c.Shown != `"`+c.Label+`"`:
				t.Errorf("%s: the cell shows %s before its text, want its column's name", where, c.Shown)
			}
		}
		if p.name == "webhooks" {
			state := tab.Text(`#webhooks a[href$="/webhooks/` + ep.ID + `"]`)
			if state == "" {
				t.Errorf("webhooks: the failing endpoint is not listed")
			}
			right := browsertest.Run(tab, chromedp.Evaluate[float64](`document.querySelector("#webhooks .badge.state-failing").getBoundingClientRect().right`))
			if right <= 0 || right > width {
				t.Errorf("webhooks: the failing badge ends at %.0f px, out of the %d px window", right, width)
			}
		}

		h := browsertest.Run(tab, chromedp.Evaluate[headerBox](headerJS))
		text := strings.TrimSpace(h.Text)
		if h.Lines > 2 || h.Height > 2.5*h.LineHeight {
			t.Errorf("%s: the header takes %d lines, %.0f px of %.1f px lines: %q", p.name, h.Lines, h.Height, h.LineHeight, text)
		}
		for _, line := range strings.Split(text, "\n") {
			if l := strings.TrimSpace(line); regexp.MustCompile(`[·|,]$`).MatchString(l) || strings.HasPrefix(l, "·") {
				t.Errorf("%s: a line of the header ends or starts with a separator: %q", p.name, l)
			}
		}
		if !strings.Contains(text, "Sign out") || !strings.Contains(text, "Tokens") || !strings.Contains(text, "Webhooks") {
			t.Errorf("%s: the header reads %q, want the pages and Sign out", p.name, text)
		}
	}
}

// TestTableCellsNameTheirColumn: every cell of the console's tables carries
// its column's name (data-label, the header cell's text), which a narrow
// screen shows before it when the rows stack; and the header separates its
// items by spacing, not by "·" characters a wrapped line would end in.
func TestTableCellsNameTheirColumn(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.issue(t, "ledger.credit")
	keys, err := token.NewKeyring(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dispatch.Create(t.Context(), s.pool, keys, loopback, tenant, dispatch.NewEndpoint{URL: "http://127.0.0.1:9/in"}); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	thRE := regexp.MustCompile(`<th>([^<]*)</th>`)
	tdRE := regexp.MustCompile(`<td(?:\s[^>]*)?>`)
	labelRE := regexp.MustCompile(`\sdata-label="([^"]*)"`)
	for _, path := range []string{"/console/tokens?state=all", "/console/webhooks"} {
		_, body := c.do(http.MethodGet, path, nil, nil)
		table, _, ok := strings.Cut(body, "</table>")
		if !ok || !strings.Contains(table, `class="stack"`) {
			t.Errorf("%s: no stacking table:\n%s", path, body)
			continue
		}
		var columns []string
		for _, m := range thRE.FindAllStringSubmatch(table, -1) {
			columns = append(columns, m[1])
		}
		cells := tdRE.FindAllString(table, -1)
		if len(columns) == 0 || len(cells) == 0 || len(cells)%len(columns) != 0 {
			t.Errorf("%s: %d header cells, %d cells", path, len(columns), len(cells))
			continue
		}
		for i, td := range cells {
			m := labelRE.FindStringSubmatch(td)
			if want := columns[i%len(columns)]; m == nil || m[1] != want {
				t.Errorf("%s: cell %d is %s, want data-label=%q", path, i, td, want)
			}
		}
		_, header, _ := strings.Cut(body, "<header>")
		header, _, _ = strings.Cut(header, "</header>")
		if strings.Contains(header, "·") {
			t.Errorf("%s: the header separates its items with \"·\":\n%s", path, header)
		}
	}
}
