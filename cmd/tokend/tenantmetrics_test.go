package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// TestMetricsNameNoTenant: the unauthenticated /metrics of a serving
// tokend carries no label naming a tenant, nor one of its endpoints, while
// that tenant has webhook deliveries owed to a failing endpoint and reads
// its feed; the tenant's own figures are at GET /v1/admin/webhook-stats,
// for its operator key only (another tenant's operator sees none of them).
func TestMetricsNameNoTenant(t *testing.T) {
	t.Parallel()
	const tenant = "tnt-zq9x7-distinctive"
	dbURL := ledgertest.NewURL(t)
	op := proctest.CreateKey(t, dbURL, tenant, "operator")
	cl := proctest.CreateKey(t, dbURL, tenant, "client")
	otherOp := proctest.CreateKey(t, dbURL, "globex", "operator")
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: []string{"TOKEND_WEBHOOK_ALLOWED_HOSTS=127.0.0.1"}})
	auth := func(key string) http.Header { return http.Header{"Authorization": {"Bearer " + key}} }

	res, body := httpDo(t, "POST", srv.URL+"/v1/admin/webhooks", `{"url":"`+failing.URL+`/hook"}`, auth(op))
	var ep struct{ ID string }
	if err := json.Unmarshal([]byte(body), &ep); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("register: %d %s", res.StatusCode, body)
	}
	for _, intent := range []string{"i-1", "i-2", "i-3"} {
		h := auth(cl)
		h.Set("Idempotency-Key", intent)
		if res, body := httpDo(t, "POST", srv.URL+"/v1/tokens", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`, h); res.StatusCode != http.StatusCreated {
			t.Fatalf("issue: %d %s", res.StatusCode, body)
		}
	}
	httpDo(t, "GET", srv.URL+"/v1/events", "", auth(cl))

	var stats struct {
		Pending          int
		FailingEndpoints int `json:"failing_endpoints"`
		Endpoints        []struct{ ID string }
	}
	for deadline := time.Now().Add(pgtest.SettleTimeout); stats.FailingEndpoints == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint never failed: %+v", stats)
		}
		res, body := httpDo(t, "GET", srv.URL+"/v1/admin/webhook-stats", "", auth(op))
		if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &stats) != nil {
			t.Fatalf("webhook-stats: %d %s", res.StatusCode, body)
		}
	}
	if stats.Pending == 0 || len(stats.Endpoints) != 1 || stats.Endpoints[0].ID != ep.ID {
		t.Errorf("the tenant's operator sees %+v; want its endpoint %s owing deliveries", stats, ep.ID)
	}
	if _, body := httpDo(t, "GET", srv.URL+"/v1/admin/webhook-stats", "", auth(otherOp)); strings.Contains(body, ep.ID) || strings.Contains(body, failing.URL) {
		t.Errorf("another tenant's operator sees this tenant's endpoint: %s", body)
	}

	// A scrape whose webhook read runs past its 2 s bound leaves those
	// gauges out (a loaded Citus cluster, 64 shard tasks a read): scrape
	// again until they are in, so that the check below covers them.
	var scrape string
	for deadline := time.Now().Add(pgtest.SettleTimeout); ; time.Sleep(200 * time.Millisecond) {
		var res *http.Response
		res, scrape = httpDo(t, "GET", srv.URL+"/metrics", "", nil)
		if res.StatusCode == http.StatusOK && strings.Contains(scrape, "tokend_webhook_undelivered ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics: %d, without the webhook gauges:\n%s", res.StatusCode, scrape)
		}
	}
	for _, s := range []string{tenant, "zq9x7", ep.ID} {
		if strings.Contains(scrape, s) {
			t.Errorf("/metrics names %q:\n%s", s, scrape)
		}
	}
}
