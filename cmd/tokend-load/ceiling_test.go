package main

import (
	"context"
	"encoding/json"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/token"
)

// TestCeilingOnTokend checks on tokend's own API (httpapi on a fresh
// database) what the no-lookup ceiling row relies on: a GET of ceilingID is
// authenticated (a wrong key gets 401), reaches the handler (404 with code
// token_not_found, not a router's 404) and takes no Postgres connection, while
// a GET of an unknown id of the right shape does. Then it runs a short bench
// against that API, with a debug listener, and checks the ceiling row, the
// ratio line and the profiles.
func TestCeilingOnTokend(t *testing.T) {
	pgbenchPath, psqlPath := tools(t)
	ctx := context.Background()
	url := ledgertest.NewURL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keyring, err := token.NewKeyring(strings.Repeat("s", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	handlers := consume.NewRegistry()
	ledger.Register(handlers)
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keyring})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Pool: pool, Issuer: intent.NewIssuer(keyring, intent.WithHandlers(handlers)), Spender: spender, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	defer srv.Close()
	_, key, err := apikey.Create(ctx, pool, "bench", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}

	if token.ValidID(ceilingID) || len(ceilingID) != len(token.NewID()) || !strings.HasPrefix(ceilingID, token.IDPrefix) {
		t.Fatalf("ceilingID %q must have a token id's prefix and length but not its shape", ceilingID)
	}
	get := func(key, id string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/tokens/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var p struct{ Code string }
		_ = json.Unmarshal(b, &p)
		return resp.StatusCode, p.Code
	}
	if status, code := get(key, ceilingID); status != http.StatusNotFound || code != ceilingCode {
		t.Fatalf("GET ceilingID: %d %q, want 404 %s", status, code, ceilingCode)
	}
	if status, code := get("tk_not_a_key", ceilingID); status != http.StatusUnauthorized || code != "unauthorized" {
		t.Fatalf("GET ceilingID with a wrong key: %d %q, want 401 unauthorized", status, code)
	}
	before := pool.Stat().AcquireCount()
	for range 20 {
		if status, code := get(key, ceilingID); status != http.StatusNotFound || code != ceilingCode {
			t.Fatalf("GET ceilingID: %d %q", status, code)
		}
	}
	if n := pool.Stat().AcquireCount() - before; n != 0 {
		t.Fatalf("20 GETs of ceilingID took %d Postgres connections, want none", n)
	}
	before = pool.Stat().AcquireCount()
	if status, code := get(key, token.NewID()); status != http.StatusNotFound || code != ceilingCode || pool.Stat().AcquireCount() == before {
		t.Fatalf("GET of an unknown token id: %d %q and no Postgres connection; the check above proves nothing", status, code)
	}

	debug := http.NewServeMux()
	debug.HandleFunc("/debug/pprof/", pprof.Index)
	debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
	debugSrv := httptest.NewServer(debug)
	defer debugSrv.Close()
	cfg := Config{
		db: url, benchDir: "../../bench", out: t.TempDir(), pgbench: pgbenchPath, psql: psqlPath,
		URL: srv.URL, key: key, PprofURL: debugSrv.URL,
		Concurrency: []int{2}, DurationSeconds: 1, Repeats: 1, Ops: []string{opIssue, opSpend, opLookup},
		GrowthC: 2, RSSC: 2, Accounts: 10, Headroom: 5,
	}
	var out, log strings.Builder
	if err := run(ctx, cfg, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	res, err := readResults(cfg.out + "/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var lookupSides []string
	for _, r := range res.Runs {
		if r.Errors != 0 || r.OK == 0 || r.Note != "" {
			t.Errorf("bad run %+v", r)
		}
		if r.Op == opLookup {
			lookupSides = append(lookupSides, r.Side)
		}
	}
	if want := []string{sideLimit, sideTokend, sideCeiling}; !slices.Equal(lookupSides, want) {
		t.Errorf("lookup runs %v, want %v", lookupSides, want)
	}
	if len(res.LookupRatios) != 1 || res.LookupRatios[0].Ceiling <= 0 || res.LookupRatios[0].Cached != 0 {
		t.Errorf("lookup ratios %+v", res.LookupRatios)
	}
	for _, want := range []string{"lookup tokend, no lookup (ceiling)", "no-lookup ceiling/uncached", "cached/uncached - (C=2)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if res.Profile != "" || len(res.Profiles) != 2 {
		t.Fatalf("profile %q, profiles %q; want one of issue and one of spend", res.Profile, res.Profiles)
	}
	for i, op := range []string{opIssue, opSpend} {
		path := cfg.out + "/tokend-" + op + "-cpu.pprof"
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 || !strings.HasPrefix(res.Profiles[i], op+": "+path) {
			t.Errorf("%s profile: %q, %v", op, res.Profiles[i], err)
		}
	}
}
