package admin

import (
	"context"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

func TestUnresolved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	for _, q := range []func() (Stats, error){
		func() (Stats, error) { return Unresolved(ctx, e.pool) },
		func() (Stats, error) { return UnresolvedTenant(ctx, e.pool, tenant) },
	} {
		if s, err := q(); err != nil || s != (Stats{}) {
			t.Errorf("empty database: %+v, %v; want zero Stats", s, err)
		}
	}

	// Created hours ago: ages are measured from creation by the database clock.
	made := func(tn string, s token.State, hoursAgo int) {
		id := e.tokenIn(tn, s).Token.ID
		e.exec(`UPDATE tokens SET created_at = now() - make_interval(hours => $2) WHERE id = $1`, id, hoursAgo)
	}
	made(tenant, token.Pending, 2)
	made(tenant, token.Pending, 1)
	made(tenant, token.Unknown, 3)
	made(other, token.Pending, 4)
	made(other, token.Unknown, 5)
	made(other, token.Unknown, 1)
	// Neither pending nor unknown, however old: not counted.
	for _, s := range []token.State{token.Issued, token.Consumed, token.Failed, token.Revoked, token.Expired} {
		made(tenant, s, 9)
	}

	tests := []struct {
		name                   string
		get                    func() (Stats, error)
		pending, unknown       int64
		pendingAge, unknownAge time.Duration
	}{
		{"all tenants", func() (Stats, error) { return Unresolved(ctx, e.pool) }, 3, 3, 4 * time.Hour, 5 * time.Hour},
		{tenant, func() (Stats, error) { return UnresolvedTenant(ctx, e.pool, tenant) }, 2, 1, 2 * time.Hour, 3 * time.Hour},
		{other, func() (Stats, error) { return UnresolvedTenant(ctx, e.pool, other) }, 1, 2, 4 * time.Hour, 5 * time.Hour},
		{"a tenant with none", func() (Stats, error) { return UnresolvedTenant(ctx, e.pool, "initech") }, 0, 0, 0, 0},
	}
	// The ages grow while the test runs; a minute of slack is plenty.
	near := func(got, want time.Duration) bool { return got >= want && got < want+time.Minute }
	for _, tt := range tests {
		s, err := tt.get()
		if err != nil {
			t.Fatal(err)
		}
		if s.Pending != tt.pending || s.Unknown != tt.unknown || !near(s.OldestPendingAge, tt.pendingAge) || !near(s.OldestUnknownAge, tt.unknownAge) {
			t.Errorf("%s: %+v; want %d pending (oldest %v), %d unknown (oldest %v)", tt.name, s, tt.pending, tt.pendingAge, tt.unknown, tt.unknownAge)
		}
	}
}
