package intent_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const tenant = "acme"

func newIssuer(t *testing.T) *intent.Issuer {
	t.Helper()
	keys := tokentest.Keys(t)
	return intent.NewIssuer(keys, intent.WithHandlers(ledger.Handlers()))
}

func request(key string) intent.Request {
	return intent.Request{
		Tenant: tenant, Operation: "ledger.credit", IntentID: key, Subject: "alice",
		TTLSeconds: 600, Payload: []byte(`{"account":"alice","amount":10}`), Actor: "test",
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestIssueSameIntentReturnsSameToken(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()

	first, err := is.Issue(ctx, pool, request("order-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Replayed || first.Token.State != token.Issued || !token.ValidID(first.Token.ID) {
		t.Fatalf("first = %+v", first.Token)
	}
	// Same intent, same request, even with reformatted JSON: the same token.
	req := request("order-1")
	req.Payload = []byte(`{ "amount": 10, "account": "alice" }`)
	again, err := is.Issue(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Token.ID != first.Token.ID || again.Secret != first.Secret {
		t.Fatalf("retry gave %s (replayed=%v), want %s again with the same secret", again.Token.ID, again.Replayed, first.Token.ID)
	}
	if !again.Token.ExpiresAt.Equal(first.Token.ExpiresAt) || !bytes.Equal(again.Token.PayloadDigest, first.Token.PayloadDigest) {
		t.Fatal("replay differs in expiry or digest")
	}
	// A new intent is a new token.
	other, err := is.Issue(ctx, pool, request("order-2"))
	if err != nil {
		t.Fatal(err)
	}
	if other.Token.ID == first.Token.ID || other.Secret == first.Secret {
		t.Fatal("a new intent got the old token")
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens`); n != 2 {
		t.Fatalf("%d tokens stored, want 2", n)
	}
}

func TestIssueSameKeyDifferentRequestIsRefused(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	if _, err := is.Issue(ctx, pool, request("k")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*intent.Request)
	}{
		{"amount", func(r *intent.Request) { r.Payload = []byte(`{"account":"alice","amount":11}`) }},
		{"no payload", func(r *intent.Request) { r.Payload = nil }},
		{"subject", func(r *intent.Request) { r.Subject = "bob" }},
		{"ttl", func(r *intent.Request) { r.TTLSeconds = 601 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := request("k")
			tc.mutate(&req)
			if _, err := is.Issue(ctx, pool, req); !errors.Is(err, intent.ErrKeyReused) {
				t.Fatalf("err = %v, want ErrKeyReused", err)
			}
		})
	}
	// Ignored fields are not part of the request's identity.
	req := request("k")
	req.Payload = []byte(`{"account":"alice","amount":10,"trace_id":"t-2"}`)
	if out, err := is.Issue(ctx, pool, req); err != nil || !out.Replayed {
		t.Fatalf("retry with another trace_id = %v, %v; want a replay", out.Replayed, err)
	}
	// The same key under another operation is another intent.
	req = request("k")
	req.Operation = "ledger.debit"
	if out, err := is.Issue(ctx, pool, req); err != nil || out.Replayed {
		t.Fatalf("same key, other operation = %v, %v; want a new token", out.Replayed, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens`); n != 2 {
		t.Fatalf("%d tokens stored, want 2", n)
	}
}

func TestIssueInvalidRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	tests := []struct {
		name   string
		mutate func(*intent.Request)
		want   error
	}{
		{"empty key", func(r *intent.Request) { r.IntentID = "" }, intent.ErrInvalidRequest},
		{"control char in key", func(r *intent.Request) { r.IntentID = "a\x00b" }, intent.ErrInvalidRequest},
		{"long key", func(r *intent.Request) { r.IntentID = strings.Repeat("k", 256) }, intent.ErrInvalidRequest},
		{"empty subject", func(r *intent.Request) { r.Subject = "" }, intent.ErrInvalidRequest},
		{"zero ttl", func(r *intent.Request) { r.TTLSeconds = 0 }, intent.ErrInvalidRequest},
		{"ttl over the operation's max", func(r *intent.Request) { r.TTLSeconds = operation.DefaultMaxTTLSeconds + 1 }, intent.ErrInvalidRequest},
		{"bad payload", func(r *intent.Request) { r.Payload = []byte(`{"a":1,"a":2}`) }, intent.ErrInvalidRequest},
		{"unknown operation", func(r *intent.Request) { r.Operation = "nope.nothing" }, operation.ErrUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := request("bad")
			tc.mutate(&req)
			if _, err := is.Issue(ctx, pool, req); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens`); n != 0 {
		t.Fatalf("%d tokens stored by invalid requests", n)
	}
}

func TestIssueConcurrentSameIntent(t *testing.T) {
	t.Parallel()
	pool, is := ledgertest.NewPool(t), newIssuer(t)
	const n = 50
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		secrets  = map[token.Secret]int{}
		replayed int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := is.Issue(context.Background(), pool, request("race"))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			secrets[out.Secret]++
			if out.Replayed {
				replayed++
			}
		}()
	}
	wg.Wait()
	if len(secrets) != 1 || replayed != n-1 {
		t.Fatalf("%d distinct secrets, %d replays; want 1 and %d", len(secrets), replayed, n-1)
	}
	if c := count(t, pool, `SELECT count(*) FROM tokens`); c != 1 {
		t.Fatalf("%d tokens stored, want 1", c)
	}
}

// The retention boundary, judged by the database clock: before it the intent
// is remembered, at and after it the same key issues a new token.
func TestIssueRetentionBoundary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		retainUntil string
		state       token.State
		wantNew     bool
	}{
		{"just before", "now() + interval '1 second'", token.Consumed, false},
		{"at", "now()", token.Consumed, true},
		{"after", "now() - interval '1 second'", token.Consumed, true},
		{"after, expired unspent", "now() - interval '1 second'", token.Issued, true},
		{"after, but pending", "now() - interval '1 day'", token.Pending, false},
		{"after, but unknown", "now() - interval '1 day'", token.Unknown, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
			first, err := is.Issue(ctx, pool, request("kept"))
			if err != nil {
				t.Fatal(err)
			}
			var again intent.Issued
			// One transaction, so now() is the same instant for the update and the re-issue.
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE tokens SET state = $1, expires_at = least(expires_at, `+tc.retainUntil+`), retain_until = `+tc.retainUntil+` WHERE id = $2`, tc.state, first.Token.ID)
				if err != nil {
					return err
				}
				again, err = is.IssueTx(ctx, tx, request("kept"))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if gotNew := again.Token.ID != first.Token.ID; gotNew != tc.wantNew {
				t.Fatalf("new token = %v, want %v", gotNew, tc.wantNew)
			}
			if tc.wantNew && (again.Replayed || again.Secret == first.Secret) {
				t.Fatal("a new token must have a new secret and not be a replay")
			}
			if c := count(t, pool, `SELECT count(*) FROM tokens`); c != 1 {
				t.Fatalf("%d tokens stored, want 1", c)
			}
		})
	}
}

// A dump of the database alone must not yield a usable token secret.
func TestDatabaseDumpHoldsNoSecret(t *testing.T) {
	t.Parallel()
	pgDump, err := exec.LookPath("pg_dump")
	if err != nil {
		t.Fatalf("pg_dump not found: %v", err)
	}
	url := ledgertest.NewURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	is := newIssuer(t)
	var secrets []string
	for _, k := range []string{"a", "b", "c"} {
		out, err := is.Issue(context.Background(), pool, request(k))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, out.Secret.Reveal())
	}
	dump, err := exec.Command(pgDump, "--data-only", "--inserts", url).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if !bytes.Contains(dump, []byte("INSERT INTO public.tokens")) {
		t.Fatal("dump holds no token rows; the check below would prove nothing")
	}
	for _, s := range secrets {
		body := strings.TrimPrefix(s, token.SecretPrefix)
		if bytes.Contains(dump, []byte(body)) {
			t.Fatal("the dump contains a token secret")
		}
	}
}
