package apikey_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

var (
	secretRE = regexp.MustCompile(`^tkd_[A-Za-z0-9_-]{43}$`)
	idRE     = regexp.MustCompile(`^key_[0-9a-v]{26}$`)
)

func TestCreateResolve(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)

	for _, role := range []apikey.Role{apikey.Client, apikey.Operator} {
		k, secret, err := apikey.Create(ctx, pool, "acme", role)
		if err != nil {
			t.Fatalf("Create(%s): %v", role, err)
		}
		if !secretRE.MatchString(secret) || !idRE.MatchString(k.ID) {
			t.Errorf("Create(%s) = id %q, secret of shape %q", role, k.ID, secretRE.ReplaceAllString(secret, "tkd_<43>"))
		}
		got, err := apikey.Resolve(ctx, pool, secret)
		if err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if got.ID != k.ID || got.Tenant != "acme" || got.Role != role || !got.CreatedAt.Equal(k.CreatedAt) {
			t.Errorf("Resolve = %+v, want %+v", got, k)
		}

		// Only the hash is stored.
		var stored []byte
		if err := pool.QueryRow(ctx, `SELECT key_hash FROM api_keys WHERE tenant_id = 'acme' AND id = $1`, k.ID).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(secret))
		if !bytes.Equal(stored, sum[:]) {
			t.Errorf("stored key_hash = %x, want sha256 of the secret", stored)
		}
		// And its route, by which it is found without its tenant.
		var tenant string
		if err := pool.QueryRow(ctx, `SELECT key_tenant FROM api_key_routes WHERE key_hash = $1`, sum[:]).Scan(&tenant); err != nil || tenant != "acme" {
			t.Errorf("route of the key: %q, %v; want acme", tenant, err)
		}
	}
}

// A key without a route, made by an instance older than migration 016
// while it ran, is still found, by its hash alone; a route never finds
// another tenant's key.
func TestResolveWithoutRoute(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	old, oldSecret, err := apikey.Create(ctx, pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM api_key_routes WHERE key_tenant = 'acme'`); err != nil {
		t.Fatal(err)
	}
	if got, err := apikey.Resolve(ctx, pool, oldSecret); err != nil || got.ID != old.ID || got.Tenant != "acme" {
		t.Errorf("Resolve(a key without a route) = %+v, %v; want %s of acme", got, err, old.ID)
	}

	_, secret, err := apikey.Create(ctx, pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	if _, err := pool.Exec(ctx, `UPDATE api_key_routes SET key_tenant = 'other' WHERE key_hash = $1`, sum[:]); err != nil {
		t.Fatal(err)
	}
	if k, err := apikey.Resolve(ctx, pool, secret); !errors.Is(err, apikey.ErrUnauthorized) {
		t.Errorf("Resolve(a key routed to another tenant) = %+v, %v; want ErrUnauthorized", k, err)
	}
}

func TestResolveRejects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	_, secret, err := apikey.Create(ctx, pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(secret, apikey.SecretPrefix)
	// A well-formed key nobody was given.
	unknown := apikey.SecretPrefix + strings.Repeat("A", 43)

	tests := []struct {
		name, presented string
	}{
		{"empty", ""},
		{"unknown", unknown},
		{"no prefix", body},
		{"token prefix", "tks_" + body},
		{"upper-case prefix", "TKD_" + body},
		{"truncated", secret[:len(secret)-1]},
		{"extra character", secret + "A"},
		{"trailing newline", secret + "\n"},
		{"standard base64 alphabet", apikey.SecretPrefix + strings.Repeat("+", 43)},
		{"padded", secret + "="},
	}
	for _, tt := range tests {
		if k, err := apikey.Resolve(ctx, pool, tt.presented); !errors.Is(err, apikey.ErrUnauthorized) {
			t.Errorf("%s: Resolve = %+v, %v; want ErrUnauthorized", tt.name, k, err)
		}
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	k, secret, err := apikey.Create(ctx, pool, "acme", apikey.Operator)
	if err != nil {
		t.Fatal(err)
	}
	other, otherSecret, err := apikey.Create(ctx, pool, "globex", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}

	// A tenant cannot revoke another tenant's key, nor a key that does not exist.
	for _, tt := range []struct{ tenant, id string }{{"acme", other.ID}, {"globex", k.ID}, {"acme", "key_missing"}} {
		if _, err := apikey.Revoke(ctx, pool, tt.tenant, tt.id); !errors.Is(err, apikey.ErrNotFound) {
			t.Errorf("Revoke(%s, %s) = %v, want ErrNotFound", tt.tenant, tt.id, err)
		}
	}
	if _, err := apikey.Resolve(ctx, pool, otherSecret); err != nil {
		t.Fatalf("a failed revoke changed another key: Resolve = %v", err)
	}

	h, err := apikey.Revoke(ctx, pool, "acme", k.ID)
	if err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if want := sha256.Sum256([]byte(secret)); !bytes.Equal(h, want[:]) {
		t.Errorf("Revoke returned hash %x, want the key's SHA-256 %x", h, want)
	}
	if _, err := apikey.Resolve(ctx, pool, secret); !errors.Is(err, apikey.ErrUnauthorized) {
		t.Errorf("Resolve(revoked) error = %v, want ErrUnauthorized", err)
	}
	var first, again *time.Time
	if err := pool.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE id = $1`, k.ID).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", k.ID); err != nil {
		t.Errorf("Revoke(revoked) = %v, want nil", err)
	}
	if err := pool.QueryRow(ctx, `SELECT revoked_at FROM api_keys WHERE id = $1`, k.ID).Scan(&again); err != nil {
		t.Fatal(err)
	}
	if first == nil || again == nil || !first.Equal(*again) {
		t.Errorf("revoked_at = %v then %v, want the first revocation kept", first, again)
	}
	if _, err := apikey.Resolve(ctx, pool, otherSecret); err != nil {
		t.Errorf("revoking acme's key affected globex's: %v", err)
	}
}

func TestCreateInvalid(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	tests := []struct {
		tenant string
		role   apikey.Role
	}{
		{"", apikey.Client},
		{"Acme", apikey.Client},
		{"-acme", apikey.Client},
		{"_acme", apikey.Client},
		{"ac me", apikey.Client},
		{"acme.corp", apikey.Client},
		{"acmé", apikey.Client},
		{strings.Repeat("a", 65), apikey.Client},
		{"acme", ""},
		{"acme", "admin"},
		{"acme", "Operator"},
	}
	for _, tt := range tests {
		if _, _, err := apikey.Create(ctx, pool, tt.tenant, tt.role); !errors.Is(err, apikey.ErrInvalid) {
			t.Errorf("Create(%q, %q) error = %v, want ErrInvalid", tt.tenant, tt.role, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_keys`).Scan(&n); err != nil || n != 0 {
		t.Errorf("api_keys has %d rows (%v) after invalid creates, want 0", n, err)
	}
	// The longest and shortest names that are allowed.
	for _, tenant := range []string{strings.Repeat("a", 64), "0", "a-b_c"} {
		if _, _, err := apikey.Create(ctx, pool, tenant, apikey.Client); err != nil {
			t.Errorf("Create(%q) = %v", tenant, err)
		}
	}
}

func TestRoleIncludes(t *testing.T) {
	tests := []struct {
		have, need apikey.Role
		want       bool
	}{
		{apikey.Client, apikey.Client, true},
		{apikey.Operator, apikey.Client, true},
		{apikey.Operator, apikey.Operator, true},
		{apikey.Client, apikey.Operator, false},
		{"", apikey.Client, false},
	}
	for _, tt := range tests {
		if got := tt.have.Includes(tt.need); got != tt.want {
			t.Errorf("%q.Includes(%q) = %v, want %v", tt.have, tt.need, got, tt.want)
		}
	}
}
