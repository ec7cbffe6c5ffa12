package operation_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	good := operation.Policy{Name: "payment.capture", Mode: operation.Lease, IgnoredFields: []string{"trace_id", "meta.request_id"}}.WithDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("good policy: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*operation.Policy)
	}{
		{"empty name", func(p *operation.Policy) { p.Name = "" }},
		{"upper-case name", func(p *operation.Policy) { p.Name = "Payment.Capture" }},
		{"name with space", func(p *operation.Policy) { p.Name = "pay ment" }},
		{"long name", func(p *operation.Policy) { p.Name = strings.Repeat("a", 101) }},
		{"mode", func(p *operation.Policy) { p.Mode = "eventual" }},
		{"expiry policy", func(p *operation.Policy) { p.OnLeaseExpiry = "retry" }},
		{"negative lease", func(p *operation.Policy) { p.LeaseSeconds = -1 }},
		{"zero max ttl", func(p *operation.Policy) { p.MaxTTLSeconds = 0 }},
		{"negative retention", func(p *operation.Policy) { p.RetentionSeconds = -1 }},
		{"empty ignored field", func(p *operation.Policy) { p.IgnoredFields = []string{""} }},
		{"dangling dot", func(p *operation.Policy) { p.IgnoredFields = []string{"meta."} }},
		{"NUL in ignored field", func(p *operation.Policy) { p.IgnoredFields = []string{"trace\x00id"} }},
		{"ignored field not UTF-8", func(p *operation.Policy) { p.IgnoredFields = []string{"trace\xffid"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			p.IgnoredFields = append([]string(nil), good.IgnoredFields...)
			tc.mutate(&p)
			if err := p.Validate(); !errors.Is(err, operation.ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
}

// builtins stands for a program with two built-in operations, as tokend
// serve has the example ledger's.
var builtins = func() *consume.Registry {
	r := consume.NewRegistry()
	noop := consume.HandlerFunc(func(context.Context, pgx.Tx, consume.Call) (consume.Outcome, error) {
		return consume.Outcome{Status: 200}, nil
	})
	r.RegisterBuiltin(operation.Policy{Name: "shop.credit", IgnoredFields: []string{"trace_id"}}, noop)
	r.RegisterBuiltin(operation.Policy{Name: "shop.debit", IgnoredFields: []string{"trace_id"}}, noop)
	return r
}()

func TestStore(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()

	if p, err := operation.Get(ctx, pool, "acme", "shop.credit", builtins); err != nil || p.Mode != operation.Atomic {
		t.Fatalf("built-in = %+v, %v", p, err)
	}
	if _, err := operation.Get(ctx, pool, "acme", "payment.capture", builtins); !errors.Is(err, operation.ErrUnknown) {
		t.Fatalf("undeclared: %v, want ErrUnknown", err)
	}
	put, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "payment.capture", Mode: operation.Lease, OnLeaseExpiry: operation.OnExpiryTakeover}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if put.LeaseSeconds != operation.DefaultLeaseSeconds || put.RetentionSeconds != operation.DefaultRetentionSeconds {
		t.Fatalf("defaults not applied: %+v", put)
	}
	got, err := operation.Get(ctx, pool, "acme", "payment.capture", builtins)
	if err != nil || got.OnLeaseExpiry != operation.OnExpiryTakeover || got.Mode != operation.Lease {
		t.Fatalf("get = %+v, %v", got, err)
	}
	// Declarations are per tenant.
	if _, err := operation.Get(ctx, pool, "other", "payment.capture", builtins); !errors.Is(err, operation.ErrUnknown) {
		t.Fatalf("other tenant sees it: %v", err)
	}
	// A tenant may override a built-in; List shows each name once.
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "shop.credit", Mode: operation.Atomic, MaxTTLSeconds: 60}, builtins); err != nil {
		t.Fatal(err)
	}
	list, err := operation.List(ctx, pool, "acme", builtins)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
		if p.Name == "shop.credit" && p.MaxTTLSeconds != 60 {
			t.Fatalf("override not listed: %+v", p)
		}
	}
	if got, want := strings.Join(names, ","), "payment.capture,shop.credit,shop.debit"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "Bad Name"}, nil); !errors.Is(err, operation.ErrInvalid) {
		t.Fatalf("invalid put: %v", err)
	}
	// A name no declaration can have is unknown, whatever its bytes.
	for _, name := range []string{"pay\x00ment", "pay\xffment", "Bad Name"} {
		if _, err := operation.Get(ctx, pool, "acme", name, builtins); !errors.Is(err, operation.ErrUnknown) {
			t.Errorf("Get(%q) = %v, want ErrUnknown", name, err)
		}
	}
}

func TestPutRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	tests := []struct {
		name     string
		p        operation.Policy
		want     error
		wantMode operation.Mode
	}{
		{"atomic without a handler", operation.Policy{Name: "shop.order", Mode: operation.Atomic}, operation.ErrNotRunnable, ""},
		{"built-in into lease", operation.Policy{Name: "shop.credit", Mode: operation.Lease}, operation.ErrBuiltin, ""},
		{"omitted mode, no handler", operation.Policy{Name: "shop.ship"}, nil, operation.Lease},
		{"omitted mode, a handler", operation.Policy{Name: "shop.debit"}, nil, operation.Atomic},
		{"built-in in its mode", operation.Policy{Name: "shop.credit", Mode: operation.Atomic}, nil, operation.Atomic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := operation.Put(ctx, pool, "acme", tc.p, builtins)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("Put = %v, want %v", err, tc.want)
				}
				if p, err := operation.Get(ctx, pool, "acme", tc.p.Name, builtins); err == nil && p.Version != 0 {
					t.Fatalf("a refused Put was stored: %+v", p)
				}
				return
			}
			if err != nil || got.Mode != tc.wantMode {
				t.Fatalf("Put = %+v, %v; want mode %s", got, err, tc.wantMode)
			}
		})
	}
	// Without handlers, no operation can be declared atomic.
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "shop.credit", Mode: operation.Atomic}, nil); !errors.Is(err, operation.ErrNotRunnable) {
		t.Errorf("atomic with no handlers: %v, want ErrNotRunnable", err)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	if _, err := operation.Delete(ctx, pool, "acme", "shop.credit", builtins); !errors.Is(err, operation.ErrBuiltin) {
		t.Errorf("delete a built-in: %v, want ErrBuiltin", err)
	}
	if _, err := operation.Delete(ctx, pool, "acme", "never.declared", builtins); !errors.Is(err, operation.ErrUnknown) {
		t.Errorf("delete an undeclared operation: %v, want ErrUnknown", err)
	}
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "pay.card"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := operation.Put(ctx, pool, "other", operation.Policy{Name: "pay.card"}, nil); err != nil {
		t.Fatal(err)
	}
	insert := func(id, state, expiresIn string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO tokens (tenant_id, id, operation, intent_id, subject, secret_hash, secret_nonce,
			secret_key_id, fingerprint, ttl_seconds, retention_seconds, state, expires_at, retain_until)
			VALUES ('acme', $1::text, 'pay.card', $1::text, 'u', sha256(convert_to($1::text, 'UTF8')), '\x00', 'k', '\x00', 60, 60, $2,
			        now() + $3::interval, now() + $3::interval + interval '1 hour')`, id, state, expiresIn); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ id, state, expiresIn string }{
		{"tok_issued", "issued", "1 minute"},
		{"tok_pending", "pending", "-1 minute"},
		{"tok_unknown", "unknown", "-1 minute"},
	} {
		insert(tc.id, tc.state, tc.expiresIn)
		if _, err := operation.Delete(ctx, pool, "acme", "pay.card", builtins); !errors.Is(err, operation.ErrInUse) {
			t.Fatalf("delete with a %s token: %v, want ErrInUse", tc.state, err)
		}
		if _, err := pool.Exec(ctx, `UPDATE tokens SET state = 'consumed' WHERE id = $1`, tc.id); err != nil {
			t.Fatal(err)
		}
	}
	// Finished tokens and issued ones past their expiry need nothing.
	insert("tok_stale", "issued", "-1 second")
	p, err := operation.Delete(ctx, pool, "acme", "pay.card", builtins)
	if err != nil || p.Name != "pay.card" || p.Mode != operation.Lease {
		t.Fatalf("Delete = %+v, %v", p, err)
	}
	if _, err := operation.Get(ctx, pool, "acme", "pay.card", builtins); !errors.Is(err, operation.ErrUnknown) {
		t.Errorf("after Delete: %v, want ErrUnknown", err)
	}
	if _, err := operation.Get(ctx, pool, "other", "pay.card", builtins); err != nil {
		t.Errorf("another tenant's declaration went too: %v", err)
	}
}

// A delete racing an issue never leaves an unfinished token whose
// declaration is gone: it waits for the issue to commit, then sees its token.
func TestDeleteWaitsForConcurrentIssue(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	keys := tokentest.Keys(t)
	is := intent.NewIssuer(keys, intent.WithHandlers(builtins))
	req := func(key string) intent.Request {
		return intent.Request{Tenant: "acme", Operation: "pay.card", IntentID: key, Subject: "u", TTLSeconds: 60, Actor: "test"}
	}
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "pay.card"}, nil); err != nil {
		t.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := is.IssueTx(ctx, tx, req("held")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := operation.Delete(ctx, pool, "acme", "pay.card", builtins)
		done <- err
	}()
	for waiting := false; !waiting; {
		select {
		case err := <-done:
			t.Fatalf("Delete = %v while an issue of the operation was uncommitted; want it to wait for the issue", err)
		case <-time.After(10 * time.Millisecond):
		}
		if err := pool.QueryRow(ctx, pgtest.LockWaitsSQL).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, operation.ErrInUse) {
		t.Fatalf("Delete after the issue committed = %v, want ErrInUse", err)
	}

	// Many rounds of issues racing a delete: whatever wins, no unfinished
	// token is left without its declaration.
	for round := range 20 {
		if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "race.op"}, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				r := req(fmt.Sprint("race-", round, "-", i))
				r.Operation = "race.op"
				_, _ = is.Issue(ctx, pool, r) // issued, or refused as unknown
			})
		}
		wg.Go(func() { _, _ = operation.Delete(ctx, pool, "acme", "race.op", builtins) })
		wg.Wait()
		var orphans int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tokens t WHERE t.state = 'issued'
			AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant_id = t.tenant_id AND o.name = t.operation)`).Scan(&orphans); err != nil {
			t.Fatal(err)
		}
		if orphans != 0 {
			t.Fatalf("round %d: %d issued tokens whose operation was deleted", round, orphans)
		}
		if _, err := pool.Exec(ctx, `UPDATE tokens SET state = 'revoked' WHERE operation = 'race.op'`); err != nil {
			t.Fatal(err)
		}
		_, _ = operation.Delete(ctx, pool, "acme", "race.op", builtins)
	}
}

// A name that could never be declared is unknown, and never reaches the
// database, where a NUL byte or invalid UTF-8 would be an error.
func TestUndeclarableNameIsUnknown(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	for _, name := range []string{"pay\x00card", "pay.\xffcard", "Pay.Card", strings.Repeat("a", 101)} {
		if _, err := operation.Get(ctx, pool, "acme", name, builtins); !errors.Is(err, operation.ErrUnknown) {
			t.Errorf("Get(%q) = %v, want ErrUnknown", name, err)
		}
		if _, err := operation.Delete(ctx, pool, "acme", name, builtins); !errors.Is(err, operation.ErrUnknown) {
			t.Errorf("Delete(%q) = %v, want ErrUnknown", name, err)
		}
	}
}
