package admin

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/token"
)

// age moves a token's every timestamp years into the past, as if it had
// waited that long: the database clock is what decides expiry and retention.
// The arithmetic is in UTC: Citus refuses timestamptz - interval (a STABLE
// operator) over a column in an UPDATE.
func (e *env) age(id string) {
	e.t.Helper()
	e.exec(`UPDATE tokens SET created_at = `+tenYearsBefore("created_at")+`, expires_at = `+tenYearsBefore("expires_at")+`,
		retain_until = `+tenYearsBefore("retain_until")+`, lease_expires_at = `+tenYearsBefore("lease_expires_at")+`,
		finished_at = `+tenYearsBefore("finished_at")+` WHERE id = $1`, id)
}

func tenYearsBefore(column string) string {
	return "(" + column + " AT TIME ZONE 'UTC' - interval '10 years') AT TIME ZONE 'UTC'"
}

// Pending and unknown tokens are owed an outcome: no sweep expires or
// purges them, however old. A lapsed lease whose policy waits for an
// operator is parked as unknown, once; a takeover one waits for the next
// spender.
func TestPurgeKeepsUnresolved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pending := e.tokenIn(tenant, token.Pending)
	unknown := e.tokenIn(tenant, token.Unknown)
	lapsing := e.tokenIn(tenant, token.Pending)
	takeover := e.issue(tenant, takeoverOp)
	e.lease(takeover)
	for _, id := range []string{unknown.Token.ID, lapsing.Token.ID, takeover.Token.ID} {
		e.age(id)
	}
	// Aged but for its lease, which has not lapsed.
	e.age(pending.Token.ID)
	e.exec(`UPDATE tokens SET lease_expires_at = now() + interval '1 hour' WHERE id = $1`, pending.Token.ID)
	// Terminal tokens past retention, so the purge has something to do.
	for range 3 {
		e.age(e.tokenIn(tenant, token.Consumed).Token.ID)
	}

	want := map[string]token.State{
		pending.Token.ID:  token.Pending,
		unknown.Token.ID:  token.Unknown,
		lapsing.Token.ID:  token.Unknown,
		takeover.Token.ID: token.Pending,
	}
	events := map[string]int{}
	for id := range want {
		events[id] = len(e.events(tenant, id))
	}
	var purged int64
	for range 5 {
		n, err := Purge(ctx, e.pool, PurgeOptions{BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		purged += n
	}
	if purged != 3 {
		t.Errorf("purged %d, want the 3 consumed tokens", purged)
	}
	for id, s := range want {
		if got := e.state(tenant, id); got != s {
			t.Errorf("token %s is %q after 5 purges, want %s", id, got, s)
		}
	}
	// The one lapse, recorded once, with the lease end it lapsed at.
	if n := len(e.events(tenant, lapsing.Token.ID)) - events[lapsing.Token.ID]; n != 1 {
		t.Errorf("the lapsed lease got %d events, want 1", n)
	}
	ev := e.lastEvent(tenant, lapsing.Token.ID)
	if ev.Kind != "lease_lapse" || *ev.From != "pending" || ev.To != "unknown" || ev.Actor != DefaultActor || ev.Detail["lease_expires_at"] == nil {
		t.Errorf("lapse event = %+v", ev)
	}
	for _, id := range []string{pending.Token.ID, unknown.Token.ID, takeover.Token.ID} {
		if n := len(e.events(tenant, id)) - events[id]; n != 0 {
			t.Errorf("token %s got %d events from the purges", id, n)
		}
	}
	if _, err := e.spend(lapsing); !errors.Is(err, token.ErrOutcomeUnknown) {
		t.Errorf("spend of the lapsed token: %v, want token.ErrOutcomeUnknown", err)
	}
	if l := e.lease(takeover); l.Generation != 2 {
		t.Errorf("takeover lease generation = %d, want 2", l.Generation)
	}
}

// An operation with no row in operations follows the default policy: a
// lapsed lease waits for an operator.
func TestPurgeLapsesLeaseOfUndeclaredOperation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Pending)
	e.exec(`DELETE FROM operations WHERE tenant_id = $1 AND name = $2`, tenant, payOp)
	e.exec(`UPDATE tokens SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, is.Token.ID)

	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.state(tenant, is.Token.ID); got != token.Unknown {
		t.Errorf("token is %s, want unknown", got)
	}
}

// An issued token past its expiry becomes expired, and is purged once its
// retention has passed too.
func TestPurgeExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	live := e.issue(tenant, ledger.Credit)
	late := e.issue(tenant, ledger.Credit)
	e.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late.Token.ID)

	n, err := Purge(ctx, e.pool, PurgeOptions{Actor: "key_ops"})
	if err != nil || n != 0 {
		t.Fatalf("Purge = %d, %v; want nothing purged yet", n, err)
	}
	rec := e.record(tenant, late.Token.ID)
	if rec.State != token.Expired || rec.FinishedAt == nil || !rec.FinishedAt.Equal(rec.ExpiresAt) {
		t.Errorf("late token is %s, finished %v; want expired, finished at its expiry %v", rec.State, rec.FinishedAt, rec.ExpiresAt)
	}
	if ev := e.lastEvent(tenant, late.Token.ID); ev.Kind != "expire" || *ev.From != "issued" || ev.To != "expired" || ev.Actor != "key_ops" {
		t.Errorf("expire event = %+v", ev)
	}
	if got := e.state(tenant, live.Token.ID); got != token.Issued {
		t.Errorf("live token is %s", got)
	}
	if _, err := e.spend(late); !errors.Is(err, token.ErrExpired) {
		t.Errorf("spend of the expired token: %v, want token.ErrExpired", err)
	}

	// A second purge has nothing to expire again.
	events := len(e.events(tenant, late.Token.ID))
	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.events(tenant, late.Token.ID)); n != events {
		t.Errorf("a second purge wrote %d events", n-events)
	}

	e.exec(`UPDATE tokens SET retain_until = now() WHERE id = $1`, late.Token.ID)
	if n, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil || n != 1 {
		t.Fatalf("Purge after retention = %d, %v; want 1", n, err)
	}
	if got := e.state(tenant, late.Token.ID); got != "" {
		t.Errorf("expired token is still there, %s", got)
	}
	if last := e.lastEvent(tenant, late.Token.ID); last.Kind != "purged" || last.To != "purged" {
		t.Errorf("purged token's last event = %+v, want a purged one", last)
	}
	if got := e.state(tenant, live.Token.ID); got != token.Issued {
		t.Errorf("live token is %q", got)
	}
}

// Every terminal state is purged once its retention has passed, not before.
func TestPurgeTerminalStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	type tok struct {
		id    string
		state token.State
		due   bool
	}
	var toks []tok
	for _, s := range []token.State{token.Consumed, token.Failed, token.Revoked, token.Expired} {
		for _, due := range []bool{false, true} {
			toks = append(toks, tok{e.tokenIn(tenant, s).Token.ID, s, due})
		}
	}
	for _, tk := range toks {
		if tk.due {
			e.exec(`UPDATE tokens SET retain_until = now() - interval '1 microsecond' WHERE id = $1`, tk.id)
		} else {
			e.exec(`UPDATE tokens SET retain_until = now() + interval '1 minute' WHERE id = $1`, tk.id)
		}
	}
	n, err := Purge(ctx, e.pool, PurgeOptions{})
	if err != nil || n != 4 {
		t.Fatalf("Purge = %d, %v; want the 4 tokens past retention", n, err)
	}
	for _, tk := range toks {
		got, events := e.state(tenant, tk.id), len(e.events(tenant, tk.id))
		switch {
		case tk.due && (got != "" || e.lastEvent(tenant, tk.id).Kind != "purged"):
			t.Errorf("%s token past retention: state %q, last event %+v; want the token gone and a purged event", tk.state, got, e.lastEvent(tenant, tk.id))
		case !tk.due && (got != tk.state || events == 0):
			t.Errorf("%s token within retention: state %q, %d events; want it kept", tk.state, got, events)
		}
	}
}

// Batches are at most BatchSize tokens, at most MaxBatches of them, and
// Progress hears of each.
func TestPurgeBatches(t *testing.T) {
	t.Parallel()
	const tokens = 25
	tests := []struct {
		name         string
		opts         PurgeOptions
		wantProgress []int64
	}{
		{"default batch", PurgeOptions{}, []int64{25}},
		{"batch of 10", PurgeOptions{BatchSize: 10}, []int64{10, 10, 5}},
		{"batch of 10, at most 2", PurgeOptions{BatchSize: 10, MaxBatches: 2}, []int64{10, 10}},
		{"batch of 1, at most 3", PurgeOptions{BatchSize: 1, MaxBatches: 3}, []int64{1, 1, 1}},
		// A full last batch needs one more, empty, to know it was the last:
		// it is not reported.
		{"batch of 25", PurgeOptions{BatchSize: 25}, []int64{25}},
		{"batch of 5, at most 5", PurgeOptions{BatchSize: 5, MaxBatches: 5}, []int64{5, 5, 5, 5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			for range tokens {
				e.age(e.tokenIn(tenant, token.Revoked).Token.ID)
			}
			var progress []int64
			tt.opts.Progress = func(n int64) { progress = append(progress, n) }
			n, err := Purge(ctx, e.pool, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, p := range progress {
				sum += p
			}
			if !slices.Equal(progress, tt.wantProgress) || n != sum {
				t.Errorf("Purge = %d, progress %v; want progress %v adding up to it", n, progress, tt.wantProgress)
			}
			if left := e.count(`SELECT count(*) FROM tokens`); left != tokens-n {
				t.Errorf("%d tokens left, want %d", left, tokens-n)
			}
			// Purging keeps the events, with a last one for each purged
			// token: the feed and webhooks may not have passed them on yet.
			if purgedEvents := e.count(`SELECT count(*) FROM token_events WHERE kind = 'purged' AND to_state = 'purged'`); purgedEvents != n {
				t.Errorf("%d purged events, want %d", purgedEvents, n)
			}
			if left := e.count(`SELECT count(DISTINCT token_id) FROM token_events`); left != tokens {
				t.Errorf("events of %d tokens left, want all %d", left, tokens)
			}
		})
	}
}

// MaxBatches bounds the expire step too, so an operator's purge of a large
// backlog returns in bounded time and the next one carries on.
func TestPurgeBoundsExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for range 5 {
		e.issue(tenant, ledger.Credit)
	}
	e.exec(`UPDATE tokens SET expires_at = now() - interval '1 second'`)
	for i, want := range []int64{2, 4, 5, 5} {
		if _, err := Purge(ctx, e.pool, PurgeOptions{BatchSize: 2, MaxBatches: 1}); err != nil {
			t.Fatal(err)
		}
		if n := e.count(`SELECT count(*) FROM tokens WHERE state = 'expired'`); n != want {
			t.Errorf("after purge %d: %d expired, want %d", i+1, n, want)
		}
	}
}

// PurgeTenant touches one tenant's tokens only.
func TestPurgeTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ids := map[string][3]string{} // tenant: consumed past retention, expiring, lapsing
	for _, tn := range []string{tenant, other} {
		done := e.tokenIn(tn, token.Consumed).Token.ID
		e.age(done)
		expiring := e.issue(tn, ledger.Credit).Token.ID
		e.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, expiring)
		lapsing := e.tokenIn(tn, token.Pending).Token.ID
		e.exec(`UPDATE tokens SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, lapsing)
		ids[tn] = [3]string{done, expiring, lapsing}
	}
	if n, err := PurgeTenant(ctx, e.pool, tenant, PurgeOptions{}); err != nil || n != 1 {
		t.Fatalf("PurgeTenant = %d, %v; want 1", n, err)
	}
	check := func(tn string, want [3]token.State) {
		t.Helper()
		for i, id := range ids[tn] {
			if got := e.state(tn, id); got != want[i] {
				t.Errorf("%s token %d is %q, want %q", tn, i, got, want[i])
			}
		}
	}
	check(tenant, [3]token.State{"", token.Expired, token.Unknown})
	check(other, [3]token.State{token.Consumed, token.Issued, token.Pending})

	if n, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	check(other, [3]token.State{"", token.Expired, token.Unknown})
}

func TestPurgeOptionsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts PurgeOptions
		ok   bool
	}{
		{PurgeOptions{}, true},
		{PurgeOptions{BatchSize: 1, MaxBatches: 1}, true},
		{PurgeOptions{BatchSize: -1}, false},
		{PurgeOptions{MaxBatches: -1}, false},
	}
	for _, tt := range tests {
		err := tt.opts.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidRequest)) {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.opts, err, tt.ok)
		}
	}
	// An invalid purge writes nothing.
	e := newEnv(t)
	e.age(e.tokenIn(tenant, token.Consumed).Token.ID)
	if _, err := Purge(context.Background(), e.pool, PurgeOptions{BatchSize: -1}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("Purge with a negative batch: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM tokens`); n != 1 {
		t.Errorf("an invalid purge left %d tokens, want 1", n)
	}
}

// The retention boundary, with intent re-issue: until retain_until the same
// intent replays the same token (and a spend replays its outcome); from
// retain_until on, whether a purge got there first or the re-issue forgets
// the intent itself, the intent issues a new token with a new effect.
// Setting retain_until to now() in the transaction that re-issues pins the
// "at" case exactly: now() is the same for every statement of it.
func TestRetentionBoundary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		retainUntil string
		replay      bool
	}{
		// A second, not a microsecond: on Citus the coordinator reads now()
		// for this UPDATE, and the worker's transaction, whose now() the
		// issue and the purge read, starts a little later.
		{"just before", `now() + interval '1 second'`, true},
		{"at", `now()`, false},
		{"just after", `now() - interval '1 microsecond'`, false},
	}
	for _, tt := range tests {
		for _, purgeFirst := range []bool{false, true} {
			name := tt.name
			if purgeFirst {
				name += ", purged"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				ctx := context.Background()
				req := issueReq(tenant, ledger.Credit)
				first, err := e.issuer.Issue(ctx, e.pool, req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := e.spend(first); err != nil {
					t.Fatal(err)
				}

				var again, purged = first, int64(0)
				err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE tokens SET retain_until = `+tt.retainUntil+` WHERE id = $1`, first.Token.ID); err != nil {
						return err
					}
					if purgeFirst {
						c, err := sweep(ctx, tx, scope{}, PurgeOptions{})
						if err != nil {
							return err
						}
						purged = c.purged
					}
					again, err = e.issuer.IssueTx(ctx, tx, req)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}

				wantPurged := int64(0)
				if purgeFirst && !tt.replay {
					wantPurged = 1
				}
				if purged != wantPurged {
					t.Errorf("purged %d, want %d", purged, wantPurged)
				}
				sameToken := again.Token.ID == first.Token.ID && again.Secret == first.Secret
				if again.Replayed != tt.replay || sameToken != tt.replay {
					t.Fatalf("re-issue: replayed %v, same token %v; want %v", again.Replayed, sameToken, tt.replay)
				}
				resp, err := e.spend(again)
				if err != nil {
					t.Fatal(err)
				}
				wantBalance := int64(1)
				if !tt.replay {
					wantBalance = 2
					if e.state(tenant, first.Token.ID) != "" {
						t.Errorf("the forgotten token is still there")
					}
					if n := e.count(`SELECT count(*) FROM token_events WHERE token_id = $1 AND kind = 'purged'`, first.Token.ID); n != 1 {
						t.Errorf("the forgotten token has %d purged events, want 1", n)
					}
				}
				if resp.Replayed != tt.replay || e.balance(tenant) != wantBalance {
					t.Errorf("spend: replayed %v, balance %d; want replayed %v, balance %d", resp.Replayed, e.balance(tenant), tt.replay, wantBalance)
				}
			})
		}
	}
}
