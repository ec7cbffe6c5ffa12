package httpapi_test

import (
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/serve/httpapi"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	res := a.get("", "/healthz")
	if res.status != http.StatusOK || string(res.body) != `{"status":"ok"}` {
		t.Errorf("healthz = %d %s", res.status, res.body)
	}
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	up := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("connection refused") }
	tests := []struct {
		name   string
		checks []httpapi.Check
		status int
		body   string
	}{
		{"database only", nil, 200, `{"status":"ready","checks":{"postgres":"ok"}}`},
		{"cache up", []httpapi.Check{{Name: "redis", Ping: up, Optional: true}}, 200, `{"status":"ready","checks":{"postgres":"ok","redis":"ok"}}`},
		{"cache down", []httpapi.Check{{Name: "redis", Ping: down, Optional: true}}, 200, `{"status":"degraded","checks":{"postgres":"ok","redis":"degraded"}}`},
		{"required dependency down", []httpapi.Check{{Name: "redis", Ping: down, Optional: true}, {Name: "queue", Ping: down}}, 503, `{"status":"unavailable","checks":{"postgres":"ok","queue":"down","redis":"degraded"}}`},
	}
	pool := ledgertest.NewPool(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A long transaction of another test on the server would add a stall.
			a := newAPIOn(t, pool, func(c *httpapi.Config) { c.Checks, c.FeedStallAfter = tt.checks, 24*time.Hour })
			res := a.get("", "/readyz")
			if res.status != tt.status || string(res.body) != tt.body {
				t.Errorf("%s: readyz = %d %s, want %d %s", tt.name, res.status, res.body, tt.status, tt.body)
			}
		})
	}
}

// TestDatabaseDown: with Postgres unreachable, the service says so with 503
// and Retry-After rather than a 500 or a 401.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1; the pool connects lazily.
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a := newAPIOn(t, pool)

	res := a.get("", "/readyz")
	if res.status != http.StatusServiceUnavailable || string(res.body) != `{"status":"unavailable","checks":{"postgres":"down"}}` || res.header.Get("Retry-After") == "" {
		t.Errorf("readyz = %d %s (Retry-After %q)", res.status, res.body, res.header.Get("Retry-After"))
	}
	if res := a.get("", "/healthz"); res.status != http.StatusOK {
		t.Errorf("healthz = %d, want 200: the process is up", res.status)
	}
	res = a.get("tkd_"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "/v1/tokens/tok_00000000000000000000000000")
	wantProblem(t, res, http.StatusServiceUnavailable, "unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if logs := a.log.String(); !containsAll(logs, `"status":503`, `"error":`) {
		t.Errorf("the 503 was not logged with its cause:\n%s", logs)
	}
}

// TestReadyzProbesRedisWhileIdle: with no traffic but /readyz itself,
// readiness says degraded within seconds of Redis going away and ok
// within seconds of its return. The breaker alone, which moves only with
// lookups, said ok throughout.
func TestReadyzProbesRedisWhileIdle(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	a := newAPI(t, withCache(t, "redis://"+rs.addr+"/0", &observer{}, nil))
	waitReady := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			res := a.get("", "/readyz")
			if res.status == http.StatusOK && strings.Contains(string(res.body), `"redis":"`+want+`"`) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz still %d %s 10s on, want redis %s", res.status, res.body, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady("ok")
	rs.stop()
	waitReady("degraded")
	rs.start()
	waitReady("ok")
}

// TestReadyzNamesAFeedStall: a transaction open on the database server past
// FeedStallAfter is named in /readyz's stalls, while the service stays
// ready: it delays the event feeds, it does not stop anything.
func TestReadyzNamesAFeedStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := ledgertest.NewPool(t)
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedStallAfter = time.Second })
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	res := a.get("", "/readyz")
	var r struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
		Stalls map[string]string `json:"stalls"`
	}
	mustUnmarshal(t, res.body, &r)
	if res.status != http.StatusOK || r.Status != "ready" || !strings.Contains(r.Stalls["event_feed"], "every event feed waits") {
		t.Errorf("readyz with a transaction open 1.5 s = %d %s, want ready with an event_feed stall", res.status, res.body)
	}
}
