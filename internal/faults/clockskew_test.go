package faults

import (
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/token"
)

// Two tokend processes on one database whose clocks are 30 s apart agree on
// expiry and lease end, because the database clock decides them. A runs 15 s
// ahead and B 15 s behind: a tokend_faketime build, whose process clock
// (internal/infra/clock) is shifted by TOKEND_FAKETIME_OFFSET.
//
//   - The skew is real: the ids A and B mint carry their own clocks, 30 s
//     apart when each is set against the database's now() at issue.
//   - Expiry, with the shortest ttl (1 s): a token issued through A and
//     spent through A at once is consumed, though A's clock already reads it
//     14 s expired; its stored expires_at is the database's now() at issue
//     plus the ttl. Once the database's now() is past a token's expiry, B,
//     whose clock gives it 14 s more, refuses it 410 token_expired.
//   - Lease end, with the shortest lease (1 s), under each expiry policy: a
//     lease granted through A is refused to a second spender 409 in_progress
//     through A (whose clock says the lease ended 14 s ago) and through B
//     while the database says it runs; once the database says it ended, B,
//     whose clock gives it 16 s more, takes over (takeover: generation 2,
//     same operation_id) or is told 409 outcome_unknown (unknown).
//
// Waits are polls of the database clock, not sleeps. A step that must land
// inside the 1 s the database allows and did not (a slow machine) proves
// nothing either way: it is retried with a fresh token, and counted.
func TestSkewedClocksAgree(t *testing.T) {
	t.Parallel()
	const (
		tenant     = "skew"
		aheadBy    = "+15s" // A's TOKEND_FAKETIME_OFFSET
		behindBy   = "-15s" // B's
		apart      = 30 * time.Second
		minTTL     = 1 // seconds: the shortest ttl_seconds an issue accepts
		minLease   = 1 // seconds: the shortest lease_seconds a policy accepts
		maxRetries = 5 // for a step a slow machine made inconclusive
	)
	dbURL := ledgertest.NewURL(t)
	start := func(offset string) *proctest.Server {
		return proctest.Start(t, proctest.Options{
			DatabaseURL: dbURL,
			BuildTags:   "tokend_faketime",
			Env:         []string{"TOKEND_FAKETIME_OFFSET=" + offset},
		})
	}
	a, b := start(aheadBy), start(behindBy)
	clientKey := proctest.CreateKey(t, dbURL, tenant, "client")
	ca, cb := newClient(t, a.URL, clientKey), newClient(t, b.URL, clientKey)
	operator := newClient(t, a.URL, proctest.CreateKey(t, dbURL, tenant, "operator"))
	// From here on, after the builds of tokend that Start and CreateKey ran.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	db := &dbClock{conn: conn, tenant: tenant}

	// The skew: each process's clock, as its ids carry it, against the
	// database's now() at issue (created_at). Minting and the insert both
	// happen within the request, so each figure is good to its round trip.
	// The test process shares the servers' host clock: its own offset from
	// the database is what A and B show without their fake offsets.
	hostOffset, hostRT := db.hostOffset(ctx, t)
	skewOf := func(c *client, name string) (skew, rt time.Duration) {
		t.Helper()
		sent := time.Now()
		tok := c.mustIssueTTL(ctx, t, "skew-"+name, credit("skew-"+name, 1), 600)
		rt = time.Since(sent)
		at, ok := token.IDTime(tok.ID)
		if !ok {
			t.Fatalf("%s minted %q, not a token id", name, tok.ID)
		}
		return at.Sub(db.token(ctx, t, tok.ID).createdAt), rt
	}
	skewA, rtA := skewOf(ca, "A")
	skewB, rtB := skewOf(cb, "B")
	near := func(got, want, within time.Duration) bool { return (got - want).Abs() <= within }
	const tick = 2 * time.Millisecond // ids and the host clock in ms, database clocks in µs
	wantA, _ := time.ParseDuration(aheadBy)
	wantB, _ := time.ParseDuration(behindBy)
	if !near(skewA-skewB, apart, rtA+rtB+tick) ||
		!near(skewA, hostOffset+wantA, rtA+hostRT+tick) || !near(skewB, hostOffset+wantB, rtB+hostRT+tick) {
		t.Fatalf("process clocks by their ids, against the database: A %v (round trip %v), B %v (%v), host %v (%v); want A %s, B %s, %v apart",
			skewA, rtA, skewB, rtB, hostOffset, hostRT, aheadBy, behindBy, apart)
	}
	t.Logf("clocks against the database's now(), by the ids each minted: A %+v (offset %s), B %+v (offset %s), %v apart; this host %+v; round trips %v, %v, %v",
		round(skewA), aheadBy, round(skewB), behindBy, round(skewA-skewB), round(hostOffset), round(rtA), round(rtB), round(hostRT))
	// clockOf is what a process's clock read when the database's read at.
	clockOf := func(skew time.Duration, at time.Time) time.Time { return at.Add(skew) }

	t.Run("expiry", func(t *testing.T) {
		in := credit("skew-expiry", 1)

		// Issued through A and spent through A at once: A's clock reads the
		// token expired already, the database does not.
		var (
			spent   issued
			spentAt time.Time // by the database clock, after the answer
			exp     time.Time
			tries   int
		)
		for {
			tries++
			if tries > maxRetries {
				t.Fatalf("%d tries to spend a %d s token at once, each answered after it expired by the database clock", maxRetries, minTTL)
			}
			before := db.now(ctx, t)
			tok := ca.mustIssueTTL(ctx, t, fmt.Sprintf("expiry-at-once-%d", tries), in, minTTL)
			after := db.now(ctx, t)
			rec := db.token(ctx, t, tok.ID)
			issuedAt := rec.expiresAt.Add(-minTTL * time.Second)
			if !rec.expiresAt.Equal(rec.createdAt.Add(minTTL*time.Second)) || issuedAt.Before(before) || issuedAt.After(after) {
				t.Fatalf("token %s created %v expires %v; want created + %d s, and that between the database's %v and %v around the issue",
					tok.ID, rec.createdAt, rec.expiresAt, minTTL, before, after)
			}
			if at, _ := token.IDTime(tok.ID); !at.After(rec.expiresAt) {
				t.Fatalf("A stamped %s at %v, not after its expiry %v: A's clock is not ahead", tok.ID, at, rec.expiresAt)
			}
			r := ca.spend(ctx, tok.Token, in)
			answered := db.now(ctx, t)
			if r.status == http.StatusOK {
				spent, spentAt, exp = tok, answered, rec.expiresAt
				break
			}
			if r.answer() != (answer{http.StatusGone, "token_expired"}) || answered.Before(rec.expiresAt) {
				t.Fatalf("spend through A %v after issue, before the database's expiry = %s, want 200", answered.Sub(rec.createdAt), r)
			}
			t.Logf("try %d: the spend was answered %v after issue, past the %d s ttl by the database clock: inconclusive, again", tries, answered.Sub(rec.createdAt), minTTL)
		}
		t.Logf("at once through A: 200 in %d tr%s; answered %v before expires_at by the database clock, %v after it by A's",
			tries, plural(tries, "y", "ies"), round(exp.Sub(spentAt)), round(clockOf(skewA, spentAt).Sub(exp)))

		// Issued through A, spent through B once the database says it
		// expired: B's clock says it has time left.
		tok := ca.mustIssueTTL(ctx, t, "expiry-late", in, minTTL)
		rec := db.token(ctx, t, tok.ID)
		waited := db.waitPast(ctx, t, rec.expiresAt)
		rb := cb.spend(ctx, tok.Token, in)
		answered := db.now(ctx, t)
		ra := ca.spend(ctx, tok.Token, in)
		expired := answer{http.StatusGone, "token_expired"}
		if rb.answer() != expired || ra.answer() != expired {
			t.Fatalf("spend past the database's expiry: through B %s, through A %s; want %v from both", rb, ra, expired)
		}
		if left := rec.expiresAt.Sub(clockOf(skewB, answered)); left <= 0 {
			t.Fatalf("B's clock read %v left on %s when it refused it: B is not behind", left, tok.ID)
		}
		t.Logf("past expiry: B %v, A %v, after polling the database clock for %v; B's clock still read %v left",
			rb.answer(), ra.answer(), round(waited), round(rec.expiresAt.Sub(clockOf(skewB, answered))))

		e := readEffects(ctx, t, dbURL, tenant)
		if got := e.tokens[spent.ID]; got.state != "consumed" || got.entries != 1 {
			t.Errorf("token spent at once: %s with %d ledger entries, want consumed with 1", got.state, got.entries)
		}
		if got := e.tokens[tok.ID]; got.state == "consumed" || got.entries != 0 {
			t.Errorf("token spent past expiry: %s with %d ledger entries, want none", got.state, got.entries)
		}
		t.Logf("ledger: %d entr%s for the token spent at once, %d for the expired one",
			e.tokens[spent.ID].entries, plural(e.tokens[spent.ID].entries, "y", "ies"), e.tokens[tok.ID].entries)
	})

	for _, tc := range []struct {
		policy string
		after  answer // to B's spend once the database says the lease ended
		grants int64  // the generation then
		state  string // the token's state then
	}{
		{"takeover", answer{http.StatusAccepted, ""}, 2, "pending"},
		{"unknown", answer{http.StatusConflict, "outcome_unknown"}, 1, "unknown"},
	} {
		t.Run("lease/"+tc.policy, func(t *testing.T) {
			name := "pay.skew." + tc.policy
			decl := fmt.Sprintf(`{"mode":"lease","on_lease_expiry":%q,"lease_seconds":%d}`, tc.policy, minLease)
			if r := operator.declare(ctx, name, decl); r.status != http.StatusOK {
				t.Fatalf("declare %s = %s", name, r)
			}
			in := intent{operation: name, subject: "bob", payload: "null"}
			busy := answer{http.StatusConflict, "in_progress"}

			// A is granted the lease; while the database says it runs, a
			// second spender is refused through A, whose clock says it
			// ended, and through B.
			var (
				tok            issued
				first          lease
				leaseEnd       time.Time
				ahead, behind  response
				answered       time.Time
				tries          int
				grantedBetween [2]time.Time
			)
			for {
				tries++
				if tries > maxRetries {
					t.Fatalf("%d tries to spend during a %d s lease, each answered after it ended by the database clock", maxRetries, minLease)
				}
				tok = cb.mustIssueTTL(ctx, t, fmt.Sprintf("lease-%s-%d", tc.policy, tries), in, 600)
				before := db.now(ctx, t)
				grant := ca.spend(ctx, tok.Token, in)
				if grant.status != http.StatusAccepted {
					t.Fatalf("spend through A = %s, want 202", grant)
				}
				first = grant.lease(t)
				ahead = ca.spend(ctx, tok.Token, in)
				behind = cb.spend(ctx, tok.Token, in)
				answered = db.now(ctx, t)
				leaseEnd = db.token(ctx, t, tok.ID).leaseExpiresAt
				grantedBetween = [2]time.Time{before, answered}
				if ahead.answer() == busy && behind.answer() == busy {
					break
				}
				if answered.Before(leaseEnd) {
					t.Fatalf("second spend during the lease (the database's now() before %v): through A %s, through B %s; want %v from both",
						leaseEnd, ahead, behind, busy)
				}
				t.Logf("try %d: answered %v past the lease's end by the database clock: inconclusive, again", tries, answered.Sub(leaseEnd))
			}
			if first.Generation != 1 || first.OperationID == "" {
				t.Fatalf("grant through A: generation %d, operation_id %q; want 1 and an id", first.Generation, first.OperationID)
			}
			if granted := leaseEnd.Add(-minLease * time.Second); granted.Before(grantedBetween[0]) || granted.After(grantedBetween[1]) {
				t.Fatalf("lease ends %v: want the database's now() at the grant plus %d s, within [%v, %v]",
					leaseEnd, minLease, grantedBetween[0], grantedBetween[1])
			}
			retryA, retryB := retryAfter(ahead), retryAfter(behind)
			if retryA < 1 || retryA > minLease || retryB < 1 || retryB > minLease {
				t.Errorf("Retry-After during the lease: through A %d, through B %d; want 1..%d s, the database's time left", retryA, retryB, minLease)
			}
			t.Logf("during the lease: A %v (Retry-After %d), B %v (Retry-After %d), in %d tr%s; answered %v before its end by the database clock, %v after it by A's",
				ahead.answer(), retryA, behind.answer(), retryB, tries, plural(tries, "y", "ies"),
				round(leaseEnd.Sub(answered)), round(clockOf(skewA, answered).Sub(leaseEnd)))

			// Once the database says the lease ended, B, whose clock says it
			// runs on, gets what the policy says.
			waited := db.waitPast(ctx, t, leaseEnd)
			next := cb.spend(ctx, tok.Token, in)
			nextAt := db.now(ctx, t)
			if next.answer() != tc.after {
				t.Fatalf("spend through B past the lease's end = %s, want %v", next, tc.after)
			}
			if left := leaseEnd.Sub(clockOf(skewB, nextAt)); left <= 0 {
				t.Fatalf("B's clock read %v left on the lease when it spent: B is not behind", left)
			}
			if tc.after.status == http.StatusAccepted {
				heir := next.lease(t)
				if heir.Generation != 2 || heir.OperationID != first.OperationID {
					t.Fatalf("takeover through B: generation %d operation_id %s, want 2 and %s", heir.Generation, heir.OperationID, first.OperationID)
				}
			}
			v := cb.view(ctx, t, tok.ID)
			if v.State != tc.state || v.Generation != tc.grants {
				t.Errorf("token after B's spend: %s generation %d, want %s generation %d", v.State, v.Generation, tc.state, tc.grants)
			}
			trail, grants := auditTrail(ctx, t, conn, tenant, tok.ID)
			if grants != tc.grants {
				t.Errorf("audit trail %s grants %d leases, want %d", trail, grants, tc.grants)
			}
			t.Logf("%s: past the lease's end (after polling the database clock for %v) B got %v while its clock still read %v left; token %s generation %d; audit: %s",
				tc.policy, round(waited), next.answer(), round(leaseEnd.Sub(clockOf(skewB, nextAt))), v.State, v.Generation, trail)
		})
	}
}

// dbClock reads the database's clock and the tokens it judges.
type dbClock struct {
	conn   *pgx.Conn
	tenant string
}

// now is the database clock at the moment it is read (clock_timestamp(),
// not the transaction's now()).
func (d *dbClock) now(ctx context.Context, t testing.TB) time.Time {
	t.Helper()
	var at time.Time
	if err := d.conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		t.Fatalf("read the database clock: %v", err)
	}
	return at
}

// hostOffset is how far this process's clock is ahead of the database's,
// good to the round trip it returns too.
func (d *dbClock) hostOffset(ctx context.Context, t testing.TB) (offset, rt time.Duration) {
	t.Helper()
	sent := time.Now()
	at := d.now(ctx, t)
	rt = time.Since(sent)
	return sent.Add(rt / 2).Sub(at), rt
}

// waitPast polls the database clock until it reads at or later, and returns
// how long that took by it.
func (d *dbClock) waitPast(ctx context.Context, t testing.TB, at time.Time) time.Duration {
	t.Helper()
	start := d.now(ctx, t)
	var last time.Time
	if !waitFor(ctx, func() bool { last = d.now(ctx, t); return !last.Before(at) }) {
		t.Fatalf("the database clock did not reach %v (last read %v)", at, last)
	}
	return last.Sub(start)
}

// dbToken is what the database holds of a token's times.
type dbToken struct {
	createdAt, expiresAt, leaseExpiresAt time.Time // zero leaseExpiresAt without a lease
}

func (d *dbClock) token(ctx context.Context, t testing.TB, id string) dbToken {
	t.Helper()
	var (
		r     dbToken
		lease *time.Time
	)
	err := d.conn.QueryRow(ctx, `
		SELECT created_at, expires_at, lease_expires_at FROM tokens
		WHERE tenant_id = $1 AND id = $2`, d.tenant, id).Scan(&r.createdAt, &r.expiresAt, &lease)
	if err != nil {
		t.Fatalf("read token %s: %v", id, err)
	}
	if lease != nil {
		r.leaseExpiresAt = *lease
	}
	return r
}

// mustIssueTTL is mustIssue with a ttl of ttlSeconds.
func (c *client) mustIssueTTL(ctx context.Context, t testing.TB, intentID string, in intent, ttlSeconds int) issued {
	t.Helper()
	tok, err := c.issueTTL(ctx, intentID, in, ttlSeconds).issued()
	if err != nil {
		t.Fatalf("issue %s: %v", intentID, err)
	}
	return tok
}

// retryAfter is an answer's Retry-After in seconds, or -1.
func retryAfter(r response) int {
	n, err := strconv.Atoi(r.retryAfter)
	if err != nil {
		return -1
	}
	return n
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
