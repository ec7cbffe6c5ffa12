package operation_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
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

// ledgerHandlers stands for a server with the ledger's handlers registered.
var ledgerHandlers = handlerSet{"ledger.credit", "ledger.debit"}

type handlerSet []string

func (h handlerSet) Has(name string) bool { return slices.Contains(h, name) }

func TestStore(t *testing.T) {
	t.Parallel()
	pool, ctx := pgtest.NewPool(t), context.Background()

	if p, err := operation.Get(ctx, pool, "acme", "ledger.credit"); err != nil || p.Mode != operation.Atomic {
		t.Fatalf("built-in = %+v, %v", p, err)
	}
	if _, err := operation.Get(ctx, pool, "acme", "payment.capture"); !errors.Is(err, operation.ErrUnknown) {
		t.Fatalf("undeclared: %v, want ErrUnknown", err)
	}
	put, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "payment.capture", Mode: operation.Lease, OnLeaseExpiry: operation.OnExpiryTakeover}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if put.LeaseSeconds != operation.DefaultLeaseSeconds || put.RetentionSeconds != operation.DefaultRetentionSeconds {
		t.Fatalf("defaults not applied: %+v", put)
	}
	got, err := operation.Get(ctx, pool, "acme", "payment.capture")
	if err != nil || got.OnLeaseExpiry != operation.OnExpiryTakeover || got.Mode != operation.Lease {
		t.Fatalf("get = %+v, %v", got, err)
	}
	// Declarations are per tenant.
	if _, err := operation.Get(ctx, pool, "other", "payment.capture"); !errors.Is(err, operation.ErrUnknown) {
		t.Fatalf("other tenant sees it: %v", err)
	}
	// A tenant may override a built-in; List shows each name once.
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "ledger.credit", Mode: operation.Atomic, MaxTTLSeconds: 60}, ledgerHandlers); err != nil {
		t.Fatal(err)
	}
	list, err := operation.List(ctx, pool, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list {
		names = append(names, p.Name)
		if p.Name == "ledger.credit" && p.MaxTTLSeconds != 60 {
			t.Fatalf("override not listed: %+v", p)
		}
	}
	if got, want := strings.Join(names, ","), "ledger.credit,ledger.debit,payment.capture"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}
	if _, err := operation.Put(ctx, pool, "acme", operation.Policy{Name: "Bad Name"}, nil); !errors.Is(err, operation.ErrInvalid) {
		t.Fatalf("invalid put: %v", err)
	}
}
