package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// A lease holder dies mid-operation: it was granted generation 1 and never
// reports. When its lease runs out (moved into the past in the database,
// rather than slept for), the operation's declared policy decides, and
// nothing is re-executed on a guess:
//
//   - takeover: the next spend gets generation 2 with the same operation_id
//     (the downstream idempotency key); the dead holder's late report is
//     refused as stale and changes nothing; the new holder's completion is
//     what every later spend replays.
//   - unknown: the next spend and every later one get 409 outcome_unknown,
//     the token stays unknown, and the dead holder's late report is refused.
func TestLeaseHolderDies(t *testing.T) {
	t.Parallel()
	const tenant = "lease"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := ledgertest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})
	c := newClient(t, srv.URL, proctest.CreateKey(t, dbURL, tenant, "client"))
	operator := newClient(t, srv.URL, proctest.CreateKey(t, dbURL, tenant, "operator"))
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })

	for _, tc := range []struct {
		policy string
		next   answer // to the first spend after the lease ran out
		late   answer // to the dead holder's complete with generation 1
		later  answer // to every spend after that (and after the new holder completed)
		// the token after the late report, and at the end
		stateAfterLate, finalState string
		grants                     int64 // leases granted: the final generation
	}{
		{
			policy:         "takeover",
			next:           answer{http.StatusAccepted, ""},
			late:           answer{http.StatusConflict, "stale_generation"},
			later:          answer{http.StatusOK, ""},
			stateAfterLate: "pending", finalState: "consumed", grants: 2,
		},
		{
			policy:         "unknown",
			next:           answer{http.StatusConflict, "outcome_unknown"},
			late:           answer{http.StatusConflict, "outcome_unknown"},
			later:          answer{http.StatusConflict, "outcome_unknown"},
			stateAfterLate: "unknown", finalState: "unknown", grants: 1,
		},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			want := func(what string, r response, a answer) {
				t.Helper()
				if r.answer() != a {
					t.Fatalf("%s = %s, want %v", what, r, a)
				}
			}
			name := "pay." + tc.policy
			decl := fmt.Sprintf(`{"mode":"lease","on_lease_expiry":%q,"lease_seconds":300}`, tc.policy)
			want("declare "+name, operator.declare(ctx, name, decl), answer{http.StatusOK, ""})
			in := intent{operation: name, subject: "bob", payload: "null"}
			tok := c.mustIssue(ctx, t, "order-"+tc.policy, in)

			// The holder is granted generation 1, then dies without a word.
			r := c.spend(ctx, tok.Token, in)
			want("first spend", r, answer{http.StatusAccepted, ""})
			dead := r.lease(t)
			if dead.Generation != 1 || dead.OperationID == "" {
				t.Fatalf("first spend = %s, want generation 1 and an operation_id", r)
			}
			// While its lease runs, the holder is presumed alive.
			busy := c.spend(ctx, tok.Token, in)
			want("spend during the lease", busy, answer{http.StatusConflict, "in_progress"})
			if busy.retryAfter == "" {
				t.Errorf("spend during the lease: 409 in_progress without Retry-After")
			}

			expireLease(ctx, t, db, tenant, tok.ID)
			next := c.spend(ctx, tok.Token, in)
			want("spend after the lease ran out", next, tc.next)
			var heir *lease
			if next.status == http.StatusAccepted {
				l := next.lease(t)
				if l.Generation != 2 || l.OperationID != dead.OperationID {
					t.Fatalf("takeover = %s, want generation 2 and operation_id %s", next, dead.OperationID)
				}
				heir = &l
			}

			late := c.complete(ctx, tok.ID, 1, `{"charge":"late"}`)
			want("dead holder's late complete", late, tc.late)
			if v := c.view(ctx, t, tok.ID); v.State != tc.stateAfterLate || v.Generation != tc.grants {
				t.Fatalf("after the late report the token is %s generation %d, want %s generation %d",
					v.State, v.Generation, tc.stateAfterLate, tc.grants)
			}

			if heir != nil {
				// The new holder completes, and its answer is lost: it sends
				// the same report again and is told the same, once recorded.
				done := c.complete(ctx, tok.ID, heir.Generation, `{"charge":"ch_1"}`)
				recorded := fmt.Sprintf(`{"token_id":"%s","state":"consumed","generation":%d,"status":200}`, tok.ID, heir.Generation)
				if done.answer() != (answer{http.StatusOK, ""}) || string(done.body) != recorded || done.replayed() {
					t.Fatalf("new holder's complete = %s, want 200 %s", done, recorded)
				}
				again := c.complete(ctx, tok.ID, heir.Generation, `{"charge":"ch_1"}`)
				if again.answer() != (answer{http.StatusOK, ""}) || !bytes.Equal(again.body, done.body) || !again.replayed() {
					t.Fatalf("new holder's complete sent again = %s (replayed %v), want %s replayed", again, again.replayed(), done.body)
				}
			}
			stored := fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"charge":"ch_1"}}`, tok.ID)
			const laterSpends = 3
			for i := range laterSpends {
				r := c.spend(ctx, tok.Token, in)
				want(fmt.Sprintf("later spend %d", i+1), r, tc.later)
				if r.status == http.StatusOK && (!r.replayed() || string(r.body) != stored) {
					t.Errorf("later spend %d = %s (replayed %v), want the stored outcome %s replayed", i+1, r, r.replayed(), stored)
				}
			}

			v := c.view(ctx, t, tok.ID)
			if v.State != tc.finalState || v.Generation != tc.grants || v.OperationID == nil || *v.OperationID != dead.OperationID {
				t.Errorf("token at the end = %+v, want %s generation %d operation_id %s", v, tc.finalState, tc.grants, dead.OperationID)
			}
			trail, grants := auditTrail(ctx, t, db, tenant, tok.ID)
			if n := int64(strings.Count(trail, "complete→")); n != tc.grants-1 {
				t.Errorf("audit trail %s records %d completions, want %d", trail, n, tc.grants-1)
			}
			if grants != tc.grants {
				t.Errorf("audit trail %s grants %d leases, want %d", trail, grants, tc.grants)
			}
			t.Logf("%s: %d lease(s) granted under one operation_id; spend after expiry: %v; dead holder's late complete: %v; %d later spends: %v; token %s generation %d; audit: %s",
				tc.policy, grants, next.answer(), late.answer(), laterSpends, tc.later, v.State, v.Generation, trail)
		})
	}
}

// answer is a status with its problem code, "" for a success.
type answer struct {
	status int
	code   string
}

func (r response) answer() answer { return answer{r.status, r.code()} }

func (a answer) String() string { return strings.TrimSpace(fmt.Sprintf("%d %s", a.status, a.code)) }

// lease is a lease-mode spend's grant.
type lease struct {
	Generation  int64  `json:"generation"`
	OperationID string `json:"operation_id"`
}

func (r response) lease(t testing.TB) lease {
	t.Helper()
	var l lease
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("lease grant %s: %v", r, err)
	}
	return l
}

// tokenView is what GET /v1/tokens/{id} tells.
type tokenView struct {
	State       string  `json:"state"`
	Generation  int64   `json:"generation"`
	OperationID *string `json:"operation_id"`
}

func (c *client) view(ctx context.Context, t testing.TB, id string) tokenView {
	t.Helper()
	tok, err := c.c.Token(ctx, id)
	if err != nil {
		t.Fatalf("GET token %s: %v", id, err)
	}
	var v tokenView
	if err := json.Unmarshal(tok.Body, &v); err != nil {
		t.Fatalf("GET token %s = %s: %v", id, tok.Body, err)
	}
	return v
}

// expireLease moves a pending token's lease end into the past, by the
// database clock that judges it, as if its lease had run out.
func expireLease(ctx context.Context, t testing.TB, db *pgx.Conn, tenant, id string) {
	t.Helper()
	tag, err := db.Exec(ctx, `
		UPDATE tokens SET lease_expires_at = now() - interval '1 second'
		WHERE tenant_id = $1 AND id = $2 AND state = 'pending'`, tenant, id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire the lease of %s: %v (%d rows)", id, err, tag.RowsAffected())
	}
}

// auditTrail is a token's event kinds in order, and how many leases they
// granted.
func auditTrail(ctx context.Context, t testing.TB, db *pgx.Conn, tenant, id string) (string, int64) {
	t.Helper()
	rows, err := db.Query(ctx, `
		SELECT kind, to_state FROM token_events
		WHERE tenant_id = $1 AND token_id = $2 ORDER BY seq`, tenant, id)
	if err != nil {
		t.Fatalf("audit trail of %s: %v", id, err)
	}
	var (
		kinds  []string
		grants int64
	)
	for rows.Next() {
		var kind, to string
		if err := rows.Scan(&kind, &to); err != nil {
			t.Fatalf("audit trail of %s: %v", id, err)
		}
		kinds = append(kinds, kind+"→"+to)
		if to == "pending" {
			grants++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("audit trail of %s: %v", id, err)
	}
	return strings.Join(kinds, ", "), grants
}
