package robust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// brokenFront is a reverse proxy before tokend that breaks one promise of
// the contract, as a defective build would: break rewrites an answer.
func brokenFront(break_ func(r *http.Request, status int, h http.Header, body []byte) []byte) func(testing.TB, string) string {
	return func(t testing.TB, upstream string) string {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorLog = log.New(io.Discard, "", 0) // requests cut at the run's end
		rp.ModifyResponse = func(resp *http.Response) error {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if b := break_(resp.Request, resp.StatusCode, resp.Header, body); b != nil {
				body = b
			}
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Del("Content-Length")
			return nil
		}
		srv := httptest.NewServer(rp)
		t.Cleanup(srv.Close)
		return srv.URL
	}
}

// staleCache answers GET /v1/tokens/{id} from a copy up to a second old,
// the class of defect DESIGN.md's Redis section rules out.
func staleCache() func(testing.TB, string) string {
	var mu sync.Mutex
	type entry struct {
		body []byte
		at   time.Time
	}
	cache := map[string]entry{}
	return brokenFront(func(r *http.Request, status int, h http.Header, body []byte) []byte {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/tokens/") || status != 200 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if e, ok := cache[r.URL.Path]; ok && time.Since(e.at) < time.Second {
			return e.body
		}
		cache[r.URL.Path] = entry{body, time.Now()}
		return nil
	})
}

// staleList answers GET /v1/admin/tokens (a list page) from a copy up to a
// second old: a list read from a lagging replica or cache.
func staleList() func(testing.TB, string) string {
	var mu sync.Mutex
	type entry struct {
		body []byte
		at   time.Time
	}
	cache := map[string]entry{}
	return brokenFront(func(r *http.Request, status int, h http.Header, body []byte) []byte {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/admin/tokens" || status != 200 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if e, ok := cache[r.URL.RawQuery]; ok && time.Since(e.at) < time.Second {
			return e.body
		}
		cache[r.URL.RawQuery] = entry{body, time.Now()}
		return nil
	})
}

// lostDelivery stands before the webhook receiver and answers every tenth
// delivery 204 without passing it on: a dispatcher that records a
// delivery it never made.
func lostDelivery(t testing.TB, upstream string) string {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%10 == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newTokenOnReplay answers an issue replay with another token id.
func newTokenOnReplay() func(testing.TB, string) string {
	return brokenFront(func(r *http.Request, status int, h http.Header, body []byte) []byte {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/tokens" || h.Get("Idempotent-Replayed") != "true" {
			return nil
		}
		var m map[string]any
		if json.Unmarshal(body, &m) != nil {
			return nil
		}
		m["id"] = fmt.Sprint(m["id"], "x")
		b, _ := json.Marshal(m)
		return b
	})
}

// lostEvent drops every consumed event from the feed's pages.
func lostEvent() func(testing.TB, string) string {
	return brokenFront(func(r *http.Request, status int, h http.Header, body []byte) []byte {
		if r.URL.Path != "/v1/events" || status != 200 {
			return nil
		}
		var page map[string]json.RawMessage
		if json.Unmarshal(body, &page) != nil {
			return nil
		}
		var items []map[string]any
		if json.Unmarshal(page["items"], &items) != nil {
			return nil
		}
		kept := items[:0]
		for _, it := range items {
			if it["to_state"] != "consumed" {
				kept = append(kept, it)
			}
		}
		page["items"], _ = json.Marshal(kept)
		b, _ := json.Marshal(page)
		return b
	})
}

// A live run through a deliberately broken layer fails the check, with a
// report naming the requests: the checker catches the defects it is for
// on real traffic, not only on histories built by hand.
func TestLiveRunCatchesBrokenBuilds(t *testing.T) {
	seed := Seed(t)
	cases := []struct {
		name      string
		front     func(testing.TB, string) string
		hookFront func(testing.TB, string) string
		want      string
	}{
		{"stale-cache", staleCache(), nil, "get("},
		{"stale-list", staleList(), nil, "list("},
		{"new-token-on-replay", newTokenOnReplay(), nil, "issue("},
		{"lost-event", lostEvent(), nil, "a lost event"},
		{"lost-delivery", nil, lostDelivery, "a lost delivery"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := Scenario{Name: "broken-" + c.name, Instances: 1, Fault: Faults["none"], Front: c.front, HookFront: c.hookFront}
			if c.hookFront != nil {
				sc.Fault = Fault{Name: "none", Webhooks: true}
			}
			// A short run on a loaded machine may send too few requests of
			// the broken kind for the break to show (a stale list needs a
			// list soon after a change): then again, longer, up to 17 s.
			var res Result
			for i, d := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
				if res = run(t, sc, d, seed+uint64(i)); !res.OK() {
					break
				}
				t.Logf("%v of traffic through %s did not show the break; again, longer", d, c.name)
			}
			if res.OK() {
				t.Fatalf("runs through a layer that breaks the contract (%s) passed the check", c.name)
			}
			rep := res.Report()
			if len(rep) > 3000 {
				rep = rep[:3000] + "\n…"
			}
			t.Logf("caught, as it should be:\n%s", rep)
			if !strings.Contains(rep, c.want) {
				t.Errorf("the report does not name a %q request", c.want)
			}
			if res.Linearizable != porcupine.Ok && res.Visualization == "" {
				t.Errorf("no visualization written")
			}
		})
	}
}
