package cache

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/tokend/tokend/token"
)

// rejection is a spend Postgres refused for good: the token was revoked or
// expired, states nothing leaves. Operation and subject are the spend's,
// which matched the token's, or Postgres would have refused it for that.
type rejection struct {
	Tenant    string      `json:"tenant"`
	Operation string      `json:"operation"`
	Subject   string      `json:"subject"`
	State     token.State `json:"state"`
}

// Rejected returns token.ErrRevoked or token.ErrExpired when Postgres
// refused an earlier spend of tenant's token with secretHash so, and this
// spend names the same operation and subject. It returns nil whenever the
// cache cannot tell, meaning: ask Postgres. A spend naming another
// operation or subject always goes to Postgres, which checks the binding
// first and answers consume.ErrBindingMismatch.
//
// Only an authentic entry (see MACKey) is believed: whoever can write to
// Redis cannot make the cache refuse a spend. No state a rejection is
// remembered for is ever left, so the answer cannot go stale; once the token is purged Postgres would answer
// token.ErrNotFound instead, until the entry's TTL runs out.
func (c *Cache) Rejected(ctx context.Context, tenant string, secretHash []byte, operation, subject string) error {
	if c.off() || len(secretHash) == 0 {
		return nil
	}
	key := c.secretKey(tenant, secretHash)
	raw, ok := c.get(ctx, kindSecret, key)
	if !ok {
		return nil
	}
	_, body, ok := c.unseal(key, raw)
	if !ok {
		c.forged(ctx, kindSecret, key, raw)
		return nil
	}
	var r rejection
	if json.Unmarshal([]byte(body), &r) != nil || r.Tenant != tenant || rejectionErr(r.State) == nil {
		c.garbage(ctx, kindSecret, key, raw)
		return nil
	}
	c.observe(kindSecret, resultHit)
	if r.Operation != operation || r.Subject != subject {
		return nil
	}
	return rejectionErr(r.State)
}

// RememberRejection records err, what Postgres answered a spend of
// tenant's token with secretHash naming operation and subject, when it is
// token.ErrRevoked or token.ErrExpired. Any other error, and nil, is
// ignored, so the caller can pass whatever the spend returned.
func (c *Cache) RememberRejection(ctx context.Context, tenant string, secretHash []byte, operation, subject string, err error) {
	if c.off() || len(secretHash) == 0 {
		return
	}
	var state token.State
	switch {
	case errors.Is(err, token.ErrRevoked):
		state = token.Revoked
	case errors.Is(err, token.ErrExpired):
		state = token.Expired
	default:
		return
	}
	body, jerr := json.Marshal(rejection{Tenant: tenant, Operation: operation, Subject: subject, State: state})
	if jerr != nil {
		return
	}
	// One version for all: the entry never changes, so no write can be late.
	c.put(ctx, kindSecret, c.secretKey(tenant, secretHash), 0, body, c.cfg.TokenTTL)
}

func rejectionErr(s token.State) error {
	switch s {
	case token.Revoked:
		return token.ErrRevoked
	case token.Expired:
		return token.ErrExpired
	}
	return nil
}

// secretKey is where a rejection is cached. The secret's hash, not the
// secret, is in it: the hash is what Postgres stores, and it spends
// nothing.
func (c *Cache) secretKey(tenant string, secretHash []byte) string {
	return c.cfg.Prefix + layout + "sec:" + tenant + ":" + hex.EncodeToString(secretHash)
}
