package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

// An issued token past its expiry, by the database clock, is expired in
// every answer of the API, before the sweeper records it and after: the
// client's read, the operator's record and list filters; a revoke of it is
// 409 invalid_state, a spend 410 token_expired, and the operator's stats
// count it nowhere. With the cache on, the answers are the same.
func TestExpiryIsAStateInEveryRead(t *testing.T) {
	t.Parallel()
	servers := []struct {
		name      string
		configure func(t *testing.T) []func(*httpapi.Config)
	}{
		{"postgres", func(*testing.T) []func(*httpapi.Config) { return nil }},
		{"cache", func(t *testing.T) []func(*httpapi.Config) {
			return []func(*httpapi.Config){withCache(t, redistest.URL(), &observer{}, nil)}
		}},
	}
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, srv.configure(t)...)
			key, op := a.client(), a.operator()
			late := a.credit(key, "late", "alice", false)
			live := a.credit(key, "live", "alice", false)
			a.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late.ID)

			lists := []struct {
				query string
				want  []string
			}{
				{"state=expired", []string{late.ID}},
				{"state=issued", []string{live.ID}},
				{"state=expired&subject=alice", []string{late.ID}},
				{"state=issued&operation=ledger.credit", []string{live.ID}},
				{"", newestFirst(late.ID, live.ID)},
			}
			check := func(when string) adminToken {
				t.Helper()
				var view struct {
					State      string  `json:"state"`
					FinishedAt *string `json:"finished_at"`
				}
				res := a.get(key, "/v1/tokens/"+late.ID)
				if jsonLoose(res.body, &view) != nil || res.status != http.StatusOK || view.State != "expired" || view.FinishedAt == nil {
					t.Errorf("%s: GET /v1/tokens/{id} = %d %s, want expired and finished", when, res.status, res.body)
				}
				rec := a.inspect(op, late.ID)
				if rec.State != "expired" || rec.FinishedAt == nil || *rec.FinishedAt != rec.ExpiresAt {
					t.Errorf("%s: operator record = state %s, finished %v; want expired, finished at %s", when, rec.State, rec.FinishedAt, rec.ExpiresAt)
				}
				if r := a.inspect(op, live.ID); r.State != "issued" {
					t.Errorf("%s: the live token reads %s", when, r.State)
				}
				for _, tt := range lists {
					res := a.get(op, "/v1/admin/tokens?"+tt.query)
					var page tokenPage
					mustUnmarshal(t, res.body, &page)
					var got []string
					for _, it := range page.Items {
						got = append(got, it.ID)
						if it.ID == late.ID && it.State != "expired" {
							t.Errorf("%s: ?%s lists it as %s", when, tt.query, it.State)
						}
					}
					if res.status != http.StatusOK || !slices.Equal(got, tt.want) {
						t.Errorf("%s: ?%s = %d %v, want %v", when, tt.query, res.status, got, tt.want)
					}
				}
				p := wantProblem(t, a.post(op, "/v1/admin/tokens/"+late.ID+"/revoke", `{"reason":"too late"}`), http.StatusConflict, "invalid_state")
				if !strings.Contains(p.Detail, "expired") {
					t.Errorf("%s: revoke detail %q should name the state, expired", when, p.Detail)
				}
				spend := spendBody(late, "ledger.credit", "alice", `{"account":"acc_1","amount":1}`)
				wantProblem(t, a.post(key, "/v1/tokens/consume", spend), http.StatusGone, "token_expired")
				if res := a.get(op, "/v1/admin/stats"); res.status != http.StatusOK || !strings.Contains(string(res.body), `"pending":0,"unknown":0`) {
					t.Errorf("%s: stats = %d %s, want nothing pending or unknown", when, res.status, res.body)
				}
				return rec
			}

			before := check("before the sweep")
			if res := a.post(op, "/v1/admin/purge", ""); res.status != http.StatusOK || string(res.body) != `{"purged":0}` {
				t.Fatalf("purge: %d %s", res.status, res.body)
			}
			if s, _ := a.tokenState(late.ID); s != "expired" {
				t.Fatalf("after the sweep the row is %s, want it recorded expired", s)
			}
			after := check("after the sweep")
			if before.State != after.State || *before.FinishedAt != *after.FinishedAt || before.Generation != after.Generation {
				t.Errorf("the record changed with the sweep:\n%+v\n%+v", before, after)
			}
			if b := a.balance("acme", "acc_1"); b != 0 {
				t.Errorf("balance = %d, want 0: nothing was spent", b)
			}
		})
	}
}
