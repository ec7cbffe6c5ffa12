package intent_test

import (
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"strings"
	"testing"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

// Server keys of the rotation tests: newIssuer issues under oldKey.
const (
	oldKey = "test-server-key-0123456789abcdef0123456789"
	newKey = "rotated-server-key-0123456789abcdef0123456789"
)

func issuerWith(t *testing.T, current string, previous ...string) *intent.Issuer {
	t.Helper()
	k, err := token.NewKeyring(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return intent.NewIssuer(k, intent.WithHandlers(ledger.Handlers()))
}

// TestReissueAfterKeyRetirement: an intent whose token derives from a key
// that was rotated out but kept as previous re-issues the same secret; once
// the key is retired, re-issuing it is refused with intent.ErrKeyRetired
// (naming the token, never a 500-style failure), writes nothing, and the
// intent's other answers are unchanged: another request under the same
// intent ID is still 422, a new intent gets a token under the new key, and
// the intent is forgotten once its retention passes.
func TestReissueAfterKeyRetirement(t *testing.T) {
	t.Parallel()
	pool, ctx := ledgertest.NewPool(t), context.Background()
	first, err := newIssuer(t).Issue(ctx, pool, request("order-1"))
	if err != nil {
		t.Fatal(err)
	}

	rotated, err := issuerWith(t, newKey, oldKey).Issue(ctx, pool, request("order-1"))
	if err != nil || !rotated.Replayed || rotated.Secret != first.Secret || rotated.Token.ID != first.Token.ID {
		t.Fatalf("re-issue after rotation = %+v, %v; want the same token and secret", rotated.Token, err)
	}

	retired := issuerWith(t, newKey)
	rows := func() int {
		return count(t, pool, `SELECT (SELECT count(*) FROM tokens) + (SELECT count(*) FROM token_events)`)
	}
	before := rows()
	for range 2 { // a retry gets the same answer
		out, err := retired.Issue(ctx, pool, request("order-1"))
		if !errors.Is(err, intent.ErrKeyRetired) || !errors.Is(err, token.ErrKeyRetired) {
			t.Fatalf("re-issue after retirement = %+v, %v; want intent.ErrKeyRetired", out.Token, err)
		}
		if !strings.Contains(err.Error(), first.Token.ID) || out.Secret != "" {
			t.Fatalf("error %q does not name the token, or a secret came back", err)
		}
	}
	if after := rows(); after != before {
		t.Fatalf("refused re-issue wrote: %d rows, was %d", after, before)
	}

	other := request("order-1")
	other.Payload = []byte(`{"account":"alice","amount":11}`)
	if _, err := retired.Issue(ctx, pool, other); !errors.Is(err, intent.ErrKeyReused) {
		t.Fatalf("other request under the intent ID = %v, want ErrKeyReused", err)
	}

	fresh, err := retired.Issue(ctx, pool, request("order-2"))
	if err != nil || fresh.Replayed {
		t.Fatalf("new intent = %+v, %v", fresh.Token, err)
	}
	if got := count(t, pool, `SELECT count(*) FROM tokens WHERE id = $1 AND secret_key_id = $2`, fresh.Token.ID, token.KeyID(newKey)); got != 1 {
		t.Fatal("the new token is not derived under the current key")
	}

	// After the intent's retention the intent ID issues a new token.
	if _, err := pool.Exec(ctx, `UPDATE tokens SET retain_until = now() - interval '1 second' WHERE id = $1`, first.Token.ID); err != nil {
		t.Fatal(err)
	}
	again, err := retired.Issue(ctx, pool, request("order-1"))
	if err != nil || again.Replayed || again.Token.ID == first.Token.ID {
		t.Fatalf("re-issue after retention = %+v, %v; want a new token", again.Token, err)
	}
}
