package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tokend/tokend/token"
)

// An issued token past its expiry, by the database clock, is expired even
// before the sweeper records it: a revoke is refused as for an expired
// token, changes nothing, and the sweep still records the expiry.
func TestRevokeRefusedPastExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Issued)
	e.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, is.Token.ID)
	before := len(e.events(tenant, is.Token.ID))

	_, err := Revoke(ctx, e.pool, tenant, is.Token.ID, Revocation{Reason: "too late", Actor: "key_ops"})
	if !errors.Is(err, token.ErrInvalidState) || !strings.Contains(err.Error(), string(token.Expired)) {
		t.Fatalf("revoke past expiry: %v; want token.ErrInvalidState naming expired", err)
	}
	if got := e.state(tenant, is.Token.ID); got != token.Issued {
		t.Errorf("the refused revoke left the row %s, want it untouched (issued until the sweep)", got)
	}
	if after := len(e.events(tenant, is.Token.ID)); after != before {
		t.Errorf("the refused revoke wrote %d events", after-before)
	}
	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := e.lastEvent(tenant, is.Token.ID); ev.Kind != "expire" || ev.To != string(token.Expired) {
		t.Errorf("after the sweep the last event is %+v, want the expiry", ev)
	}
}
