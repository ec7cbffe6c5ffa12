package main

import (
	"fmt"
	"testing"
)

// backlog is more tokens than one purge request deletes.
const backlog = 10_001

// purge deletes what is due, over as many requests as that takes, keeps what
// is not due, and prints a running total.
func TestPurge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.declareLease()
	var due []string
	for i := range 3 {
		due = append(due, f.credit(fmt.Sprint("i-", i), "alice", true).ID)
	}
	pending, _ := f.leased("pay-1")
	// Spent long ago, as written by the API, only more of them.
	f.exec(`INSERT INTO tokens (tenant_id, id, operation, intent_id, subject, secret_hash, secret_nonce, secret_key_id,
		fingerprint, ttl_seconds, retention_seconds, state, expires_at, retain_until)
		SELECT 'acme', 'tok_backlog' || i, 'ledger.credit', 'backlog-' || i, 'alice', sha256(i::text::bytea), '\x00', 'k',
		       '\x00', 60, 0, 'consumed', now(), now()
		FROM generate_series(1, $1::int) i`, backlog)
	// Retention passed for all of these, by the database clock; the pending
	// token is owed an outcome and stays however old.
	f.exec(`UPDATE tokens SET expires_at = now() - interval '2 days', retain_until = now() - interval '1 day'`)
	fresh := f.credit("i-fresh", "alice", true)

	r := f.ok("purge")
	const total = backlog + 3
	if r.stdout != fmt.Sprintf("purged %d\n", total) {
		t.Errorf("purge: %v\nwant purged %d", r, total)
	}
	// A line per round that purged, each with the sum so far.
	progress := lines(r.stderr)
	var sum int64
	for i, l := range progress {
		var round, n, inAll int64
		if _, err := fmt.Sscanf(l, "tokenctl: purge: round %d: %d purged, %d in all", &round, &n, &inAll); err != nil ||
			round != int64(i+1) || n <= 0 || inAll != sum+n {
			t.Errorf("progress line %d = %q, want round %d with a running total after %d", i, l, i+1, sum)
		}
		sum += n
	}
	if len(progress) < 2 || sum != total {
		t.Errorf("%d rounds purging %d in all, want more than one round and %d", len(progress), sum, total)
	}
	for _, id := range due {
		if s := f.state(id); s != "purged" {
			t.Errorf("token %s is %s after the purge, want it purged", id, s)
		}
	}
	if s := f.state(pending.ID); s != "pending" {
		t.Errorf("the pending token is %s after the purge", s)
	}
	if s := f.state(fresh.ID); s != "consumed" {
		t.Errorf("the token still remembered is %s after the purge", s)
	}

	var out struct {
		Purged int64 `json:"purged"`
	}
	if r := f.okJSON(&out, "purge"); out.Purged != 0 || r.stderr != "" {
		t.Errorf("purge of nothing: %v", r)
	}
}
