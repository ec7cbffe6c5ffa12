package cache

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/token"
)

func TestRejected(t *testing.T) {
	hash := []byte("0123456789abcdef0123456789abcdef")
	type spend struct {
		tenant, operation, subject string
	}
	same := spend{"acme", "ledger.credit", "user-42"}
	tests := []struct {
		name     string
		dbErr    error // what Postgres answered the first spend
		second   spend
		want     error
		wantMiss bool // the second spend finds nothing for its tenant
	}{
		{name: "revoked", dbErr: token.ErrRevoked, second: same, want: token.ErrRevoked},
		{name: "expired", dbErr: token.ErrExpired, second: same, want: token.ErrExpired},
		{name: "wrapped", dbErr: fmt.Errorf("spend: %w", token.ErrRevoked), second: same, want: token.ErrRevoked},
		{name: "another subject asks Postgres", dbErr: token.ErrRevoked, second: spend{"acme", "ledger.credit", "user-7"}},
		{name: "another operation asks Postgres", dbErr: token.ErrRevoked, second: spend{"acme", "checkout.submit", "user-42"}},
		{name: "another tenant finds nothing", dbErr: token.ErrRevoked, second: spend{"evil", "ledger.credit", "user-42"}, wantMiss: true},
		{name: "in progress is not final", dbErr: token.ErrInProgress, second: same, wantMiss: true},
		{name: "outcome unknown is not final", dbErr: token.ErrOutcomeUnknown, second: same, wantMiss: true},
		{name: "binding mismatch is not remembered", dbErr: consume.ErrBindingMismatch, second: same, wantMiss: true},
		{name: "success is not remembered", dbErr: nil, second: same, wantMiss: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c, _, obs := openMini(t, Config{})
			c.RememberRejection(ctx, same.tenant, hash, same.operation, same.subject, tt.dbErr)

			err := c.Rejected(ctx, tt.second.tenant, hash, tt.second.operation, tt.second.subject)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Rejected = %v, want %v", err, tt.want)
			}
			if hit := obs.count(kindSecret, resultHit) == 1; hit == tt.wantMiss {
				t.Errorf("hit = %v, want %v", hit, !tt.wantMiss)
			}
		})
	}
}

func TestRejectedIgnoresGarbage(t *testing.T) {
	ctx := context.Background()
	c, mr, obs := openMini(t, Config{})
	hash := []byte("0123456789abcdef0123456789abcdef")
	key := c.secretKey("acme", hash)
	for _, raw := range []string{
		c.seal(key, 0, []byte(`junk`)),
		c.seal(key, 0, []byte(`{"tenant":"acme","operation":"o","subject":"s","state":"consumed"}`)),
		c.seal(key, 0, []byte(`{"tenant":"evil","operation":"o","subject":"s","state":"revoked"}`)),
		"junk", // and forged: no MAC
		`0:{"tenant":"acme","operation":"o","subject":"s","state":"revoked"}`,
	} {
		mr.Set(key, raw)
		if err := c.Rejected(ctx, "acme", hash, "o", "s"); err != nil {
			t.Errorf("Rejected with %q in the cache = %v, want nil", raw, err)
		}
		if mr.Exists(key) {
			t.Errorf("garbage %q left in place", raw)
		}
	}
	if n := obs.count(kindSecret, resultGarbage); n != 3 {
		t.Errorf("garbage counted %d times, want 3", n)
	}
	if n := obs.count(kindSecret, resultForged); n != 2 {
		t.Errorf("forged counted %d times, want 2", n)
	}
}
