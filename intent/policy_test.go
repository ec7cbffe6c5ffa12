package intent_test

import (
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
)

// An Issuer caches policies, yet a policy redeclared elsewhere (another
// instance, here a direct operation.Put) governs the very next issue.
func TestIssueFollowsRedeclaredPolicy(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	const op = "shop.checkout"
	put := func(p operation.Policy) {
		t.Helper()
		p.Name = op
		if _, err := operation.Put(ctx, pool, tenant, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	issue := func(key string, ttl int, payload string) (intent.Issued, error) {
		req := request(key)
		req.Operation, req.TTLSeconds, req.Payload = op, ttl, []byte(payload)
		return is.Issue(ctx, pool, req)
	}

	put(operation.Policy{MaxTTLSeconds: 60, RetentionSeconds: 100})
	if _, err := issue("a", 30, `{"n":1}`); err != nil {
		t.Fatal(err) // the policy is cached now
	}

	// A lower maximum applies at once: the insert's version check catches
	// the cached policy.
	put(operation.Policy{MaxTTLSeconds: 20, RetentionSeconds: 100})
	if _, err := issue("b", 30, `{"n":1}`); !errors.Is(err, intent.ErrInvalidRequest) {
		t.Fatalf("ttl 30 over the redeclared maximum of 20: err = %v, want ErrInvalidRequest", err)
	}

	// A higher maximum applies at once too: a refusal is checked against the
	// database before it is given.
	put(operation.Policy{MaxTTLSeconds: 3600, RetentionSeconds: 100})
	if _, err := issue("c", 600, `{"n":1}`); err != nil {
		t.Fatalf("ttl 600 under the redeclared maximum of 3600: %v", err)
	}

	// Retention and ignored fields come from the current policy.
	put(operation.Policy{MaxTTLSeconds: 3600, RetentionSeconds: 5000, IgnoredFields: []string{"trace"}})
	out, err := issue("d", 600, `{"n":1,"trace":"x"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Token.RetainUntil.Sub(out.Token.ExpiresAt); got != 5000*time.Second {
		t.Errorf("retain_until - expires_at = %v, want the redeclared retention 5000s", got)
	}
	same, err := issue("e", 600, `{"n":1,"trace":"y"}`)
	if err != nil {
		t.Fatal(err)
	}
	if string(same.Token.PayloadDigest) != string(out.Token.PayloadDigest) {
		t.Error("payloads differing only in the newly ignored field got different digests")
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens WHERE operation = $1`, op); n != 4 {
		t.Errorf("%d tokens, want 4 (a, c, d, e)", n)
	}
}

// Issuing in the caller's transaction sees the caller's own redeclaration.
func TestIssueTxFollowsPolicyInSameTransaction(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	req := request("tx")
	req.Operation, req.TTLSeconds = "shop.refund", 600
	if _, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: req.Operation, MaxTTLSeconds: 3600}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := is.Issue(ctx, pool, request("warm")); err != nil {
		t.Fatal(err)
	}
	warm := req
	warm.IntentID = "warm-refund"
	if _, err := is.Issue(ctx, pool, warm); err != nil {
		t.Fatal(err) // shop.refund's policy is cached with max 3600
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := operation.Put(ctx, tx, tenant, operation.Policy{Name: req.Operation, MaxTTLSeconds: 60}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := is.IssueTx(ctx, tx, req); !errors.Is(err, intent.ErrInvalidRequest) {
		t.Fatalf("IssueTx after lowering the maximum in the same tx: err = %v, want ErrInvalidRequest", err)
	}
}

// redeclaringTx redeclares an operation, from another connection, right
// before each token insert: an operator redeclaring it again and again while
// an issue runs.
type redeclaringTx struct {
	pgx.Tx
	redeclare func()
}

func (tx redeclaringTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.Contains(q.SQL, "INSERT INTO tokens") {
			tx.redeclare()
			break
		}
	}
	return tx.Tx.SendBatch(ctx, b)
}

// An issue that keeps finding its operation redeclared under it gives up
// with ErrOperationChanging, a refusal to retry, and writes nothing.
func TestIssueRacingRedeclarations(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	const op = "shop.checkout"
	put := func() {
		if _, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: op, Mode: operation.Lease}, nil); err != nil {
			t.Error(err)
		}
	}
	put()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	req := request("racing")
	req.Operation = op
	_, err = is.IssueTx(ctx, redeclaringTx{Tx: tx, redeclare: put}, req)
	if !errors.Is(err, intent.ErrOperationChanging) {
		t.Fatalf("err = %v, want ErrOperationChanging", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tokens) + (SELECT count(*) FROM token_events)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d token rows and events written (%v), want 0", n, err)
	}
}

// A string Postgres cannot store is refused before any query, with a typed
// error naming the field.
func TestIssueRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		for name, set := range map[string]func(*intent.Request){
			"operation": func(r *intent.Request) { r.Operation = bad },
			"subject":   func(r *intent.Request) { r.Subject = bad },
			"intent id": func(r *intent.Request) { r.IntentID = bad },
			"actor":     func(r *intent.Request) { r.Actor = bad },
		} {
			req := request("text")
			set(&req)
			if _, err := is.Issue(ctx, pool, req); !errors.Is(err, intent.ErrInvalidRequest) {
				t.Errorf("%s %q: err = %v, want ErrInvalidRequest", name, bad, err)
			}
		}
	}
}

// A retry of an issue is compared under the policy its token was issued
// under: redeclaring the ignored fields, lowering the maximum ttl or deleting
// the operation does not turn it into another request.
func TestIssueRetryKeepsPolicyItWasIssuedUnder(t *testing.T) {
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	req := request("kept")
	req.Operation, req.TTLSeconds, req.Payload = "shop.ship", 600, []byte(`{"n":1,"trace":"x"}`)
	put := func(p operation.Policy) {
		t.Helper()
		p.Name = req.Operation
		if _, err := operation.Put(ctx, pool, tenant, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(operation.Policy{MaxTTLSeconds: 600})
	first, err := is.Issue(ctx, pool, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []struct {
		name  string
		apply func()
	}{
		{"ignored fields", func() { put(operation.Policy{MaxTTLSeconds: 600, IgnoredFields: []string{"trace"}}) }},
		{"lower maximum ttl", func() { put(operation.Policy{MaxTTLSeconds: 60, IgnoredFields: []string{"trace"}}) }},
		{"deleted", func() {
			if _, err := pool.Exec(ctx, `UPDATE tokens SET state = 'consumed' WHERE id = $1`, first.Token.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := operation.Delete(ctx, pool, tenant, req.Operation, nil); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		change.apply()
		again, err := is.Issue(ctx, pool, req)
		if err != nil || !again.Replayed || again.Token.ID != first.Token.ID || again.Secret != first.Secret {
			t.Fatalf("%s: retry = %+v, %v; want the first token replayed", change.name, again.Token, err)
		}
		other := req
		other.Payload = []byte(`{"n":2,"trace":"x"}`)
		// Refused: the key is taken, or the current policy refuses it.
		if _, err := is.Issue(ctx, pool, other); !errors.Is(err, intent.ErrKeyReused) && !errors.Is(err, intent.ErrInvalidRequest) && !errors.Is(err, operation.ErrUnknown) {
			t.Fatalf("%s: another request with the same key: %v, want it refused", change.name, err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens WHERE operation = $1`, req.Operation); n != 1 {
		t.Errorf("%d tokens, want 1", n)
	}
}

// With a validator, a payload the operation's handler would refuse is not
// issued; lease-mode operations are not asked about.
func TestIssueValidatesPayload(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	keys := tokentest.Keys(t)
	handlers := consume.NewRegistry()
	ledger.Register(handlers)
	is := intent.NewIssuer(keys, intent.WithHandlers(handlers))

	bad := request("bad")
	bad.Payload = []byte(`{"account":"alice","amount":"10"}`)
	_, err := is.Issue(ctx, pool, bad)
	var pe *consume.PayloadError
	if !errors.Is(err, intent.ErrInvalidRequest) || !errors.As(err, &pe) || pe.Field != "amount" {
		t.Fatalf("Issue = %v, want ErrInvalidRequest with a PayloadError on amount", err)
	}
	if _, err := is.Issue(ctx, pool, request("good")); err != nil {
		t.Fatalf("a valid payload: %v", err)
	}
	if _, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: "pay.card"}, handlers); err != nil {
		t.Fatal(err)
	}
	lease := bad
	lease.IntentID, lease.Operation = "lease", "pay.card"
	if _, err := is.Issue(ctx, pool, lease); err != nil {
		t.Fatalf("lease mode: %v, want issued", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM tokens`); n != 2 {
		t.Errorf("%d tokens, want 2", n)
	}
}
