// Package apikey manages the API keys callers authenticate with. A key belongs
// to one tenant and has one role; only its SHA-256 is stored, so the plaintext
// exists once, in the answer to Create.
package apikey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/apikey/keytext"
	"github.com/tokend/tokend/internal/infra/store"
)

// Prefixes of a key's plaintext and of its public id (see keytext).
const (
	SecretPrefix = keytext.SecretPrefix
	IDPrefix     = keytext.IDPrefix
)

// Errors returned by this package.
var (
	// ErrUnauthorized: the presented key is malformed, unknown or revoked.
	// Which of these it was is deliberately not told.
	ErrUnauthorized = errors.New("apikey: unauthorized")
	// ErrInvalid: a tenant name or role is not acceptable.
	ErrInvalid = errors.New("apikey: invalid")
	// ErrNotFound: the tenant has no key with that id.
	ErrNotFound = errors.New("apikey: not found")
)

// Role is what a key may do.
type Role string

const (
	// Client keys issue, spend and inspect tokens.
	Client Role = "client"
	// Operator keys can do what client keys can, and administer the tenant.
	Operator Role = "operator"
)

// ParseRole returns the Role named s, or an error wrapping ErrInvalid.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Client, Operator:
		return r, nil
	}
	return "", fmt.Errorf("%w: role %q: want client or operator", ErrInvalid, s)
}

// Includes reports whether a key of role r may do what role need allows.
func (r Role) Includes(need Role) bool {
	return r == need || r == Operator && need == Client
}

// Key is an API key as stored, without its plaintext.
type Key struct {
	ID        string
	Tenant    string
	Role      Role
	CreatedAt time.Time
}

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// ValidTenant reports whether name can name a tenant: 1 to 64 of a-z, 0-9,
// '_' and '-', starting with a letter or a digit.
func ValidTenant(name string) bool { return tenantRE.MatchString(name) }

// Create makes a new key for tenant with role and returns it with its
// plaintext secret, which is not kept anywhere: it must be handed to its
// owner now. A tenant exists once it has a key.
func Create(ctx context.Context, q db.DBTX, tenant string, role Role) (Key, string, error) {
	if !ValidTenant(tenant) {
		return Key{}, "", fmt.Errorf("%w: tenant %q: want 1 to 64 of a-z 0-9 _ -, starting with a letter or digit", ErrInvalid, tenant)
	}
	if _, err := ParseRole(string(role)); err != nil {
		return Key{}, "", err
	}
	secret := keytext.NewSecret()
	k := Key{ID: keytext.NewID(), Tenant: tenant, Role: role}
	at, err := store.CreateAPIKey(ctx, q, store.APIKeyRow{Tenant: tenant, ID: k.ID, Role: string(role), Hash: hash(secret)})
	if err != nil {
		return Key{}, "", err
	}
	k.CreatedAt = at
	return k, secret, nil
}

// Resolve returns the live key whose plaintext is presented, or
// ErrUnauthorized.
func Resolve(ctx context.Context, q db.DBTX, presented string) (Key, error) {
	if !keytext.WellFormed(presented) {
		return Key{}, ErrUnauthorized
	}
	want := hash(presented)
	r, ok, err := store.ResolveAPIKey(ctx, q, want)
	switch {
	case err != nil:
		return Key{}, err
	case !ok:
		return Key{}, ErrUnauthorized
	}
	// The index lookup already matched the hash; comparing again in constant
	// time keeps the decision itself from depending on where bytes differ.
	if subtle.ConstantTimeCompare(r.Hash, want) != 1 {
		return Key{}, ErrUnauthorized
	}
	return Key{ID: r.ID, Tenant: r.Tenant, Role: Role(r.Role), CreatedAt: r.CreatedAt}, nil
}

// Revoke makes tenant's key id unusable from now on and returns the key's
// hash, so a cache of resolutions can drop it. Revoking a revoked key
// succeeds and keeps the first revocation time.
//
// The same statement notifies every Watch on the database, which hears of
// it when (and only if) the transaction q belongs to commits.
func Revoke(ctx context.Context, q db.DBTX, tenant, id string) (keyHash []byte, err error) {
	keyHash, ok, err := store.RevokeAPIKey(ctx, q, tenant, id)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return keyHash, nil
}

// Live returns nil if tenant has a key id that is not revoked, and
// ErrUnauthorized otherwise. It is for what names a key without presenting
// it, such as a console session signed in with it.
func Live(ctx context.Context, q db.DBTX, tenant, id string) error {
	live, err := store.APIKeyLive(ctx, q, tenant, id)
	switch {
	case err != nil:
		return err
	case !live:
		return ErrUnauthorized
	}
	return nil
}

func hash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}
