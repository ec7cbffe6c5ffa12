package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/webhookapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
	"github.com/tokend/tokend/webhook"
)

// TestWebhookRoutes: an operator registers an endpoint (its secret shown
// once), sees its deliveries and attempts, disables, enables, redelivers and
// removes it; another tenant's operator and a client key see none of it.
func TestWebhookRoutes(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("w", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int64
	var secret atomic.Value
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := webhook.Receive(secret.Load().(string), r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		received.Add(1)
	}))
	defer receiver.Close()
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{AllowedHosts: []string{"127.0.0.1"}}))
	})
	op := a.operator()

	res := a.post(op, "/v1/admin/webhooks", `{"url":"`+receiver.URL+`/hook","event_types":["issued"]}`)
	var created struct {
		ID, URL, Secret string
		EventTypes      []string `json:"event_types"`
		Enabled         bool
	}
	loose(t, res.body, &created)
	if res.status != http.StatusCreated || !strings.HasPrefix(created.Secret, "whsec_") || !created.Enabled ||
		res.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create = %d %s %v", res.status, res.body, res.header)
	}
	secret.Store(created.Secret)
	for _, path := range []string{"/v1/admin/webhooks", "/v1/admin/webhooks/" + created.ID} {
		if res := a.get(op, path); res.status != http.StatusOK || strings.Contains(string(res.body), created.Secret) || strings.Contains(string(res.body), `"secret"`) {
			t.Errorf("GET %s = %d %s: want 200 without the secret", path, res.status, res.body)
		}
	}

	a.issue(a.client(), "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	d, err := dispatch.New(dispatch.Config{Pool: a.pool, Keys: keys, AllowedHosts: []string{"127.0.0.1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(pgtest.SettleTimeout); received.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the issue was never delivered")
		}
		if _, err := d.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	res = a.get(op, "/v1/admin/webhooks/"+created.ID)
	var detail struct {
		Deliveries []struct {
			State string
			Tries []struct{ Status *int }
		}
	}
	loose(t, res.body, &detail)
	if len(detail.Deliveries) != 1 || detail.Deliveries[0].State != "delivered" || len(detail.Deliveries[0].Tries) != 1 ||
		detail.Deliveries[0].Tries[0].Status == nil || *detail.Deliveries[0].Tries[0].Status != http.StatusOK {
		t.Errorf("deliveries = %s, want one delivered at the first try", res.body)
	}

	for _, step := range []struct{ path, body, want string }{
		{"/disable", "", `"enabled":false`},
		{"/enable", "", `"enabled":true`},
	} {
		if res := a.post(op, "/v1/admin/webhooks/"+created.ID+step.path, step.body); res.status != http.StatusOK || !strings.Contains(string(res.body), step.want) {
			t.Errorf("POST %s = %d %s", step.path, res.status, res.body)
		}
	}
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"all":true}`, 0}, // what is delivered is sent again only when asked
		{`{"all":true,"delivered":true}`, 1},
	} {
		res = a.post(op, "/v1/admin/webhooks/"+created.ID+"/redeliver", c.body)
		var re struct{ Redelivered int64 }
		loose(t, res.body, &re)
		if res.status != http.StatusOK || re.Redelivered != c.want {
			t.Errorf("redeliver %s = %d %s, want %d", c.body, res.status, res.body, c.want)
		}
	}
	wantProblem(t, a.post(op, "/v1/admin/webhooks/"+created.ID+"/redeliver", `{"after":-1}`), http.StatusBadRequest, "invalid_request")
	wantProblem(t, a.post(op, "/v1/admin/webhooks/"+created.ID+"/redeliver", `{"position":-5}`), http.StatusBadRequest, "invalid_request")

	// A rotation shows the new secret once; the old one is never shown.
	res = a.post(op, "/v1/admin/webhooks/"+created.ID+"/rotate-secret", `{"overlap_seconds":60}`)
	var rotated struct {
		Secret  string
		Expires *time.Time `json:"previous_secret_expires_at"`
	}
	loose(t, res.body, &rotated)
	if res.status != http.StatusOK || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == created.Secret || rotated.Expires == nil {
		t.Errorf("rotate-secret = %d %s", res.status, res.body)
	}
	if res := a.get(op, "/v1/admin/webhooks/"+created.ID); strings.Contains(string(res.body), created.Secret) || strings.Contains(string(res.body), rotated.Secret) {
		t.Errorf("GET after a rotation shows a secret: %s", res.body)
	}
	for _, body := range []string{`{"overlap_seconds":-1}`, `{"overlap_seconds":99999999}`, `{"overlap_seconds":"1h"}`, `{"x":1}`} {
		wantProblem(t, a.post(op, "/v1/admin/webhooks/"+created.ID+"/rotate-secret", body), http.StatusBadRequest, "invalid_request")
	}
	wantProblem(t, a.post(a.key("other", apikey.Operator), "/v1/admin/webhooks/"+created.ID+"/rotate-secret", `{}`), http.StatusNotFound, "not_found")

	other := a.key("other", apikey.Operator)
	wantProblem(t, a.get(other, "/v1/admin/webhooks/"+created.ID), http.StatusNotFound, "not_found")
	wantProblem(t, a.post(other, "/v1/admin/webhooks/"+created.ID+"/disable", ""), http.StatusNotFound, "not_found")
	if res := a.get(other, "/v1/admin/webhooks"); res.status != http.StatusOK || strings.Contains(string(res.body), created.ID) {
		t.Errorf("another tenant's list = %d %s", res.status, res.body)
	}
	if res := a.get(a.client(), "/v1/admin/webhooks"); res.status != http.StatusForbidden {
		t.Errorf("a client key's list = %d, want 403", res.status)
	}

	res = a.do(request{method: http.MethodDelete, path: "/v1/admin/webhooks/" + created.ID, key: op})
	if res.status != http.StatusOK {
		t.Errorf("delete = %d %s", res.status, res.body)
	}
	wantProblem(t, a.get(op, "/v1/admin/webhooks/"+created.ID), http.StatusNotFound, "not_found")
}

func TestWebhookCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("w", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{AllowedHosts: []string{"hooks.example"}}))
	})
	for _, body := range []string{
		`{}`, `{"url":"ftp://hooks.example/"}`, `{"url":"https://elsewhere.example/"}`,
		`{"url":"https://hooks.example/","event_types":["nope"]}`, `{"url":"https://hooks.example/","extra":1}`,
		`{"url":"https://u:p@hooks.example/"}`, `[]`, `{"url":"https://hooks.example:0/"}`, `{"url":"https://hooks.example:99999/"}`,
		`{"url":"http://127.0.0.1/"}`, `{"url":"http://2130706433/"}`, `{"url":"http://[::ffff:127.0.0.1]/"}`, `{"url":"http://localhost./"}`,
		`{"url":"http://169.254.169.254/latest/meta-data/"}`, `{"url":"http://0x7f000001/"}`, `{"url":42}`,
	} {
		wantProblem(t, a.post(a.operator(), "/v1/admin/webhooks", body), http.StatusBadRequest, "invalid_request")
	}
	if res := a.post(a.operator(), "/v1/admin/webhooks", `{"url":"https://hooks.example/in"}`); res.status != http.StatusCreated {
		t.Errorf("an allowed host = %d %s", res.status, res.body)
	}
	var n int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d endpoints (%v), want only the allowed one", n, err)
	}
}

// loose decodes the fields the test names; the contract checks the rest.
func loose(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := jsonLoose(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// TestWebhookRefusalsSayWhatHappened: a refused webhook request answers a
// detail in the operator's words, naming the setting that decides it, and
// nothing of the server's own names ("dispatch: host not allowed: refused:
// address not allowed" was what a refused address read); the detail says
// <, > and & as themselves, not \u003c.
func TestWebhookRefusalsSayWhatHappened(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("w", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	listed := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{AllowedHosts: []string{"hooks.example"}, MaxEndpoints: 1}))
	})
	open := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{}))
	})
	if res := listed.post(listed.operator(), "/v1/admin/webhooks", `{"url":"https://hooks.example/in"}`); res.status != http.StatusCreated {
		t.Fatalf("create = %d %s", res.status, res.body)
	}
	tests := []struct {
		name   string
		a      *api
		method string
		path   string
		body   string
		status int
		code   string
		want   []string
	}{
		{"a loopback address", open, http.MethodPost, "/v1/admin/webhooks", `{"url":"http://127.0.0.1:9000/hook"}`, http.StatusBadRequest, "invalid_request",
			[]string{"loopback, private or reserved address", "TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"the metadata address", open, http.MethodPost, "/v1/admin/webhooks", `{"url":"http://169.254.169.254/latest/meta-data/"}`, http.StatusBadRequest, "invalid_request",
			[]string{"TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"a host off the allow-list", listed, http.MethodPost, "/v1/admin/webhooks", `{"url":"https://elsewhere.example/"}`, http.StatusBadRequest, "invalid_request",
			[]string{"elsewhere.example is not on the server's allow-list, TOKEND_WEBHOOK_ALLOWED_HOSTS"}},
		{"one endpoint too many", listed, http.MethodPost, "/v1/admin/webhooks", `{"url":"https://hooks.example/two"}`, http.StatusConflict, "too_many_endpoints",
			[]string{"your tenant has the most webhook endpoints this server allows (1, TOKEND_WEBHOOK_MAX_ENDPOINTS)", "TOKEND_WEBHOOK_MAX_ENDPOINTS"}},
		{"a missing endpoint", open, http.MethodGet, "/v1/admin/webhooks/whe_missing", "", http.StatusNotFound, "not_found",
			[]string{"no webhook endpoint with this id"}},
		{"markup in the URL", open, http.MethodPost, "/v1/admin/webhooks", `{"url":"<key>&<b>"}`, http.StatusBadRequest, "invalid_request",
			[]string{`url "<key>&<b>": want an absolute http or https URL`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.a.do(request{method: tt.method, path: tt.path, key: tt.a.operator(), body: tt.body})
			p := wantProblem(t, res, tt.status, tt.code)
			for _, w := range tt.want {
				if !strings.Contains(p.Detail, w) {
					t.Errorf("detail %q, want it to say %q", p.Detail, w)
				}
			}
			for _, internal := range []string{"dispatch", "refused:", "host not allowed", "invalid request"} {
				if strings.Contains(p.Detail, internal) {
					t.Errorf("detail %q says %q", p.Detail, internal)
				}
			}
			if strings.Contains(tt.body, "<") && (strings.Contains(string(res.body), `\u003c`) || strings.Contains(string(res.body), `\u0026`) ||
				!strings.Contains(string(res.body), `<key>&<b>`)) {
				t.Errorf("the body escapes markup as HTML: %s", res.body)
			}
		})
	}
}
