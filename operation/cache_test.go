package operation_test

import (
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"testing"

	"github.com/tokend/tokend/operation"
)

func TestCache(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	c := operation.NewCache()
	const tenant = "acme"

	// Unknown operations are not cached: declaring one shows at once.
	if _, err := c.Get(ctx, pool, tenant, "shop.checkout", builtins); !errors.Is(err, operation.ErrUnknown) {
		t.Fatalf("undeclared: err = %v, want ErrUnknown", err)
	}
	put, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: "shop.checkout", MaxTTLSeconds: 60}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, pool, tenant, "shop.checkout", builtins)
	if err != nil || got.MaxTTLSeconds != 60 || got.Version != put.Version || got.Version == 0 {
		t.Fatalf("after Put: %+v, %v; want max ttl 60, version %d", got, err, put.Version)
	}

	// The entry is served from memory: a change behind the cache's back is
	// not seen until Forget.
	if _, err := pool.Exec(ctx, `UPDATE operations SET max_ttl_seconds = 99 WHERE tenant_id = $1`, tenant); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, pool, tenant, "shop.checkout", builtins); got.MaxTTLSeconds != 60 {
		t.Errorf("cached: max ttl %d, want 60", got.MaxTTLSeconds)
	}
	c.Forget(tenant, "shop.checkout")
	if got, _ := c.Get(ctx, pool, tenant, "shop.checkout", builtins); got.MaxTTLSeconds != 99 {
		t.Errorf("after Forget: max ttl %d, want 99", got.MaxTTLSeconds)
	}

	// Callers get their own copy of the ignored fields.
	b, err := c.Get(ctx, pool, tenant, "shop.credit", builtins)
	if err != nil || b.Version != 0 {
		t.Fatalf("built-in: %+v, %v; want version 0", b, err)
	}
	b.IgnoredFields[0] = "mutated"
	if again, _ := c.Get(ctx, pool, tenant, "shop.credit", builtins); again.IgnoredFields[0] != "trace_id" {
		t.Errorf("a caller's change reached the cache: %v", again.IgnoredFields)
	}
}

// Every declaration gets a new version, even a repeat of the same policy.
func TestPutVersions(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	p := operation.Policy{Name: "shop.checkout"}
	first, err := operation.Put(ctx, pool, "acme", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := operation.Put(ctx, pool, "acme", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if first.Version == 0 || second.Version <= first.Version {
		t.Errorf("versions %d then %d, want positive and increasing", first.Version, second.Version)
	}
	got, err := operation.Get(ctx, pool, "acme", "shop.checkout", builtins)
	if err != nil || got.Version != second.Version {
		t.Errorf("Get: version %d, %v; want %d", got.Version, err, second.Version)
	}
}
