// Package browsertest drives a headless Chromium for the browser tests of the
// demo app and the operator console.
//
// Every test gets a browser context of its own (cookies, storage and cache
// of its own, as in a fresh profile), in the one Chromium a test binary
// starts at its first browser test: starting one per test, several at once
// on a small machine, was most of what a browser test took. A package's
// TestMain calls Close after its tests. When a test
// fails, a screenshot of each of its tabs is saved under artifacts/browser/
// at the repository root; with TOKEND_TEST_SCREENSHOTS=1, the pages a test
// names with Tab.Shot are saved there too. Tab.Keep saves one always.
//
// The browser is Debian's chromium at DefaultExecPath, or the one
// TOKEND_TEST_CHROMIUM names. When it is missing the tests fail, and say how
// to install it: a browser test that skips proves nothing.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// DefaultExecPath is where Debian's chromium package puts the browser.
const DefaultExecPath = "/usr/bin/chromium"

// Timeout bounds each step of a test: a navigation, a click, waiting for an
// element.
const Timeout = 30 * time.Second

// Browser is one test's browser context in the shared Chromium.
type Browser struct {
	t    *testing.T
	root context.Context // the first tab's context; its cancellation ends the browser
	tabs []*Tab
}

// Tab is a browser tab. The tabs of a Browser share their cookies.
type Tab struct {
	b    *Browser
	name string
	ctx  context.Context
}

// shared is the test binary's Chromium, started by the first New.
var shared struct {
	once   sync.Once
	mu     sync.Mutex
	root   context.Context // the browser's first tab; a browser context per test hangs off it
	cancel func()
	dir    string // its user data directory
	err    error
}

// New opens a browser context for t in the test binary's Chromium, started
// on the first call; the context and its tabs are closed when t ends.
func New(t *testing.T) *Browser {
	t.Helper()
	shared.once.Do(start)
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	shared.mu.Lock()
	parent := shared.root
	shared.mu.Unlock()
	if parent == nil {
		t.Fatal("browsertest: the browser was closed (browsertest.Close)")
	}
	// Not t.Context(): it ends before the cleanups run, and the failure
	// screenshots need the tabs.
	root, cancel := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	b := &Browser{t: t, root: root}
	t.Cleanup(cancel)
	t.Cleanup(b.saveOnFailure)
	if err := chromedp.Do(root); err != nil {
		t.Fatalf("browsertest: open a browser context: %v", err)
	}
	return b
}

// Close ends the test binary's Chromium, if one started, and deletes its
// profile. TestMain calls it after m.Run.
func Close() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.cancel != nil {
		shared.cancel()
		shared.cancel, shared.root = nil, nil
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
		shared.dir = ""
	}
}

// start starts the shared Chromium.
func start() {
	path := os.Getenv("TOKEND_TEST_CHROMIUM")
	if path == "" {
		path = DefaultExecPath
	}
	if _, err := os.Stat(path); err != nil {
		shared.err = fmt.Errorf("browsertest: no Chromium at %s (%v). Install it with\n"+
			"\tapt-get update && apt-get install -y chromium\n"+
			"or set TOKEND_TEST_CHROMIUM to a Chromium binary; scripts/test installs it", path, err)
		return
	}
	dir, err := os.MkdirTemp("", "tokend-browsertest-")
	if err != nil {
		shared.err = fmt.Errorf("browsertest: %v", err)
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
		// A page restored from the back-forward cache keeps its DOM, and so
		// its form token, but chromedp loses track of it. Without that cache,
		// Back restores from the HTTP cache: the same rendering too, and the
		// path a browser takes when the page cannot be kept.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,BackForwardCache"),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1000, 760),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	root, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(root); err != nil {
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(dir)
		shared.err = fmt.Errorf("browsertest: start %s: %v", path, err)
		return
	}
	shared.mu.Lock()
	shared.root, shared.dir = root, dir
	shared.cancel = func() {
		cancel()
		cancelAlloc()
	}
	shared.mu.Unlock()
}

// Tab returns a tab called name: the browser's first tab on the first call,
// a new one after.
func (b *Browser) Tab(name string) *Tab {
	b.t.Helper()
	tab := &Tab{b: b, name: name, ctx: b.root}
	if len(b.tabs) > 0 {
		var cancel context.CancelFunc
		tab.ctx, cancel = chromedp.NewContext(b.root)
		b.t.Cleanup(cancel)
		if err := chromedp.Do(tab.ctx); err != nil {
			b.t.Fatalf("browsertest: open tab %s: %v", name, err)
		}
	}
	b.tabs = append(b.tabs, tab)
	return tab
}

// Do runs steps in the tab, each within Timeout, and fails the test at the
// first error.
func (tab *Tab) Do(steps ...chromedp.Action[chromedp.Void]) {
	tab.b.t.Helper()
	for _, step := range steps {
		Run(tab, step)
	}
}

// Run runs action in tab within Timeout and returns its value; an error
// fails the test.
func Run[T any](tab *Tab, action chromedp.Action[T]) T {
	tab.b.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, Timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		// A page that is navigating answers nothing; do not wait for it.
		lctx, cancel := context.WithTimeout(tab.ctx, time.Second)
		defer cancel()
		loc, _ := chromedp.Run(lctx, chromedp.Location())
		tab.b.t.Fatalf("tab %s at %q: %v", tab.name, loc, err)
	}
	return v
}

// Text returns the text of the first element css selects, once it is visible.
func (tab *Tab) Text(css string) string {
	tab.b.t.Helper()
	return Run(tab, chromedp.Text(chromedp.CSS(css)))
}

// Value returns the value of the first input css selects.
func (tab *Tab) Value(css string) string {
	tab.b.t.Helper()
	return Run(tab, chromedp.Value(chromedp.CSS(css), chromedp.NodeReady))
}

// HTML returns the outer HTML of the first element css selects.
func (tab *Tab) HTML(css string) string {
	tab.b.t.Helper()
	return Run(tab, chromedp.OuterHTML(chromedp.CSS(css), chromedp.NodeReady))
}

// ClickAt returns an action that clicks the point where the element css
// selects is now. Unlike chromedp.Click, the click it makes does not wait for
// the page: while a page is navigating, Chromium answers no query about it,
// but it still takes the user's clicks.
func (tab *Tab) ClickAt(css string) chromedp.Action[chromedp.Void] {
	tab.b.t.Helper()
	box := Run(tab, chromedp.Evaluate[struct{ X, Y float64 }](
		`(() => { const r = document.querySelector(`+strconv.Quote(css)+`).getBoundingClientRect(); return {X: r.x + r.width/2, Y: r.y + r.height/2}; })()`))
	return chromedp.MouseClickXY(box.X, box.Y)
}

// DisableScripts turns JavaScript off in the tab, for this page and the next.
func (tab *Tab) DisableScripts() {
	tab.b.t.Helper()
	tab.Do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return chromedp.Void{}, err
	})
}

// Viewport makes the tab's page width by height CSS pixels, as a phone
// (mobile set: its viewport meta tag counts, its scrollbars overlay) or a
// desktop window shows it.
func (tab *Tab) Viewport(width, height int64, mobile bool) {
	tab.b.t.Helper()
	tab.Do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: width, Height: height, DeviceScaleFactor: 1, Mobile: mobile})
		return chromedp.Void{}, err
	})
}

// Overflow is how far the page is wider than its viewport.
type Overflow struct {
	ScrollWidth, ClientWidth int64  // the document's, in CSS pixels
	Widest                   string // the widest element sticking out, as tag#id.class, "" for none
}

// PageOverflow measures the page in the tab: a page that a user must scroll
// sideways has ScrollWidth > ClientWidth.
func (tab *Tab) PageOverflow() Overflow {
	tab.b.t.Helper()
	return Run(tab, chromedp.Evaluate[Overflow](`(() => {
		const d = document.documentElement, vw = d.clientWidth;
		let widest = "", right = vw;
		for (const el of document.body.querySelectorAll("*")) {
			const r = el.getBoundingClientRect().right;
			if (r > right) {
				right = r;
				widest = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className ? "." + String(el.className).split(" ").join(".") : "");
			}
		}
		return {ScrollWidth: d.scrollWidth, ClientWidth: vw, Widest: widest};
	})()`))
}

// Keep saves a screenshot of the tab's page as name.png under
// artifacts/browser/, whatever TOKEND_TEST_SCREENSHOTS says, and logs where:
// for the pages whose look a test is about.
func (tab *Tab) Keep(name string) {
	tab.b.t.Helper()
	if path, err := tab.save(name); err != nil {
		tab.b.t.Errorf("screenshot %s: %v", name, err)
	} else {
		tab.b.t.Logf("screenshot %s", path)
	}
}

// Shot saves a screenshot of the tab's page as name.png when
// TOKEND_TEST_SCREENSHOTS is set, to look at the pages.
func (tab *Tab) Shot(name string) {
	tab.b.t.Helper()
	if os.Getenv("TOKEND_TEST_SCREENSHOTS") == "" {
		return
	}
	if path, err := tab.save(name); err != nil {
		tab.b.t.Errorf("screenshot %s: %v", name, err)
	} else {
		tab.b.t.Logf("screenshot %s", path)
	}
}

// saveOnFailure saves the page of every tab of a failed test.
func (b *Browser) saveOnFailure() {
	if !b.t.Failed() {
		return
	}
	for _, tab := range b.tabs {
		if path, err := tab.save(tab.name + "-failed"); err != nil {
			b.t.Logf("screenshot of tab %s: %v", tab.name, err)
		} else {
			b.t.Logf("screenshot of tab %s: %s", tab.name, path)
		}
	}
}

func (tab *Tab) save(name string) (string, error) {
	ctx, cancel := context.WithTimeout(tab.ctx, Timeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", err
	}
	dir, err := artifactDir(tab.b.t)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".png")
	return path, os.WriteFile(path, png, 0o644)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// artifactDir returns artifacts/browser/<test name>/ at the repository root,
// created if need be.
func artifactDir(t *testing.T) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
	dir = filepath.Join(dir, "artifacts", "browser", unsafeChars.ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("artifacts: %w", err)
	}
	return dir, nil
}
