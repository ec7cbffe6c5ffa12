package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/webhookapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// TestWebhookStatsShowOnlyTheCallersTenant: GET /v1/admin/webhook-stats
// answers the figures of the operator key's tenant, per endpoint, and never
// another tenant's: acme's operator sees acme's endpoints and backlog,
// globex's sees globex's, neither sees the other's endpoint ids or URLs;
// a client key is refused.
func TestWebhookStatsShowOnlyTheCallersTenant(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("w", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{AllowedHosts: []string{"127.0.0.1"}}))
	})
	ctx := context.Background()
	acme, _, err := dispatch.Create(ctx, a.pool, keys, []string{"127.0.0.1"}, "acme", dispatch.NewEndpoint{URL: "http://127.0.0.1:1/acme-hook"})
	if err != nil {
		t.Fatal(err)
	}
	globex, _, err := dispatch.Create(ctx, a.pool, keys, []string{"127.0.0.1"}, "globex", dispatch.NewEndpoint{URL: "http://127.0.0.1:1/globex-hook"})
	if err != nil {
		t.Fatal(err)
	}
	// acme owes 3 deliveries, globex 1 (written as the feed would).
	for tenant, n := range map[string]int{"acme": 3, "globex": 1} {
		for i := range n {
			if _, err := a.pool.Exec(ctx, `
				INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status)
				VALUES ($1, $2, 'pay', 'u', 'test', 'spend', 'issued', 'consumed', 0, 200)`, tenant, "tok_"+string(rune('a'+i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One round: the deliveries are made and tried once; nothing listens
	// on port 1, so they stay owed and both endpoints are failing.
	d, err := dispatch.New(dispatch.Config{Pool: a.pool, Keys: keys, AllowedHosts: []string{"127.0.0.1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(pgtest.SettleTimeout); ; time.Sleep(10 * time.Millisecond) {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		var made, failing int
		if err := a.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_deliveries WHERE attempts > 0),
			(SELECT count(*) FROM webhook_endpoints WHERE failing_since IS NOT NULL)`).Scan(&made, &failing); err != nil {
			t.Fatal(err)
		}
		if made == 4 && failing == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries tried, %d endpoints failing; want 4 and 2", made, failing)
		}
	}

	for _, c := range []struct {
		tenant, mine, theirs, theirURL string
		pending                        int
	}{
		{"acme", acme.ID, globex.ID, "globex-hook", 3},
		{"globex", globex.ID, acme.ID, "acme-hook", 1},
	} {
		res := a.get(a.key(c.tenant, apikey.Operator), "/v1/admin/webhook-stats")
		var s struct {
			Pending          int
			FailingEndpoints int `json:"failing_endpoints"`
			Endpoints        []struct {
				ID      string
				Pending int
			}
		}
		loose(t, res.body, &s)
		if res.status != http.StatusOK || s.Pending != c.pending || s.FailingEndpoints != 1 || len(s.Endpoints) != 1 || s.Endpoints[0].ID != c.mine || s.Endpoints[0].Pending != c.pending {
			t.Errorf("%s's operator: %d %s; want 200, its own endpoint %s owing %d", c.tenant, res.status, res.body, c.mine, c.pending)
		}
		if strings.Contains(string(res.body), c.theirs) || strings.Contains(string(res.body), c.theirURL) {
			t.Errorf("%s's operator sees another tenant's endpoint: %s", c.tenant, res.body)
		}
	}
	wantProblem(t, a.get(a.client(), "/v1/admin/webhook-stats"), http.StatusForbidden, "forbidden")
	wantProblem(t, a.get("", "/v1/admin/webhook-stats"), http.StatusUnauthorized, "unauthorized")
}
