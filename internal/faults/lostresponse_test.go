package faults

import (
	"bytes"
	"context"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// The connection of a spend is cut after tokend committed it and before the
// client got the answer. The client sees a connection error, retries with
// the same token and gets the stored outcome, marked as a replay; the
// business effect happened once. A declared business failure is stored and
// replayed the same way.
func TestResponseLostAfterCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := ledgertest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})

	for _, tc := range []struct {
		name    string
		tenant  string // of its own, so that its balances are its own
		in      intent
		status  int    // of the spend and its replays
		state   string // of the token once the spend committed
		entries int    // ledger entries the spend writes
		balance int64  // of the tenant's accounts afterwards
	}{
		{"credit", "lost-credit", credit("alice", 5), http.StatusOK, "consumed", 1, 5},
		{"debit beyond the balance", "lost-debit", debit("alice", 5), http.StatusUnprocessableEntity, "failed", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := proctest.CreateKey(t, dbURL, tc.tenant, "client")
			direct := newClient(t, srv.URL, key)
			proxy := startCutProxy(t, strings.TrimPrefix(srv.URL, "http://"), 1)
			// A connection per request, so that the proxy cuts the first spend only.
			viaProxy := newClientWith(t, proxy.URL(), key, &http.Transport{DisableKeepAlives: true})
			tok := direct.mustIssue(ctx, t, "order-1", tc.in)

			first := viaProxy.spend(ctx, tok.Token, tc.in)
			if first.err == nil {
				t.Fatalf("spend through the cutting proxy answered %s, want no answer", first)
			}
			if proxy.cut.Load() != 1 {
				t.Fatalf("the proxy cut the connection before tokend answered (%v): this is not the window under test", first.err)
			}
			committed := readEffects(ctx, t, dbURL, tc.tenant).tokens[tok.ID]
			if committed.state != tc.state || committed.entries != tc.entries {
				t.Fatalf("after the cut the token is %q with %d ledger entries, want %q with %d",
					committed.state, committed.entries, tc.state, tc.entries)
			}

			retry := viaProxy.spend(ctx, tok.Token, tc.in)
			if retry.status != tc.status || !retry.replayed() || retry.state() != tc.state {
				t.Fatalf("retry = %s (replayed %v), want %d %s replayed", retry, retry.replayed(), tc.status, tc.state)
			}
			again := direct.spend(ctx, tok.Token, tc.in)
			if again.status != retry.status || !again.replayed() || !bytes.Equal(again.body, retry.body) {
				t.Errorf("second retry = %s (replayed %v), want the first retry's answer byte for byte", again, again.replayed())
			}

			e := readEffects(ctx, t, dbURL, tc.tenant)
			if got := e.tokens[tok.ID]; got != committed || e.entries != tc.entries || e.balance != tc.balance {
				t.Errorf("after the retries: token %q with %d entries, %d in all, balance %d; want %q, %d, %d, %d",
					got.state, got.entries, e.entries, e.balance, tc.state, tc.entries, tc.entries, tc.balance)
			}
			t.Logf("first spend: %v; committed before the cut: token %s with %d ledger entries; retries: %d replayed twice, byte for byte; balance %d",
				first.err, committed.state, committed.entries, retry.status, e.balance)
		})
	}
}
