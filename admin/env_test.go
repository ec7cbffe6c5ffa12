package admin

import (
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const (
	tenant = "acme"
	other  = "globex"
	// payOp is a lease-mode operation whose lapsed leases wait for an
	// operator; takeoverOp's are taken over by the next spender.
	payOp      = "payment.capture"
	takeoverOp = "payment.refund"
)

// env is a fresh database with an issuer, and a spender wired to the ledger.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	issuer  *intent.Issuer
	spender *consume.Spender
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, ledgertest.NewPool(t))
}

func newEnvOn(t *testing.T, pool *pgxpool.Pool) *env {
	t.Helper()
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	e := &env{t: t, pool: pool, issuer: k.Issuer, spender: k.Spender}
	for _, tn := range []string{tenant, other} {
		for op, policy := range map[string]operation.ExpiryPolicy{payOp: operation.OnExpiryUnknown, takeoverOp: operation.OnExpiryTakeover} {
			p := operation.Policy{Name: op, Mode: operation.Lease, OnLeaseExpiry: policy, LeaseSeconds: 60}
			if _, err := operation.Put(context.Background(), pool, tn, p, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e
}

// payload is what tokens of op are bound to and spent with. Every credit
// goes to acc_1, so its balance counts the credits that took effect; debits
// come from an account never credited, so they fail for good.
func payload(op string) []byte {
	switch op {
	case ledger.Credit:
		return []byte(`{"account":"acc_1","amount":1}`)
	case ledger.Debit:
		return []byte(`{"account":"acc_empty","amount":1}`)
	}
	return nil
}

// issueReq is a request for a new intent of op in tn.
func issueReq(tn, op string) intent.Request {
	return intent.Request{Tenant: tn, Operation: op, IntentID: token.NewID(), Subject: "alice", TTLSeconds: 600, Payload: payload(op), Actor: "test"}
}

func (e *env) issue(tn, op string) intent.Issued {
	e.t.Helper()
	out, err := e.issuer.Issue(context.Background(), e.pool, issueReq(tn, op))
	if err != nil {
		e.t.Fatalf("issue: %v", err)
	}
	return out
}

func spendReq(is intent.Issued) consume.Request {
	return consume.Request{
		Tenant: is.Token.Tenant, Secret: is.Secret, Operation: is.Token.Operation,
		Subject: is.Token.Subject, Payload: payload(is.Token.Operation), Actor: "spender",
	}
}

func (e *env) spend(is intent.Issued) (consume.Response, error) {
	return e.spender.Spend(context.Background(), e.pool, spendReq(is))
}

// lease spends a lease-mode token and returns the lease it was granted.
func (e *env) lease(is intent.Issued) *consume.Lease {
	e.t.Helper()
	resp, err := e.spend(is)
	if err != nil || resp.Lease == nil {
		e.t.Fatalf("lease spend = %+v, %v", resp, err)
	}
	return resp.Lease
}

// tokenIn returns a token of tn driven to state s through the real paths.
// Getting to expired takes a purge, which also purges whatever else is due.
func (e *env) tokenIn(tn string, s token.State) intent.Issued {
	e.t.Helper()
	ctx := context.Background()
	var is intent.Issued
	switch s {
	case token.Issued, token.Revoked, token.Expired:
		is = e.issue(tn, ledger.Credit)
	case token.Consumed:
		is = e.issue(tn, ledger.Credit)
		if _, err := e.spend(is); err != nil {
			e.t.Fatal(err)
		}
	case token.Failed:
		// A debit of an empty account is a final business failure.
		is = e.issue(tn, ledger.Debit)
		if resp, err := e.spend(is); err != nil || resp.State != token.Failed {
			e.t.Fatalf("debit = %+v, %v; want failed", resp, err)
		}
	case token.Pending, token.Unknown:
		is = e.issue(tn, payOp)
		l := e.lease(is)
		if s == token.Unknown {
			_, err := consume.Finish(ctx, e.pool, token.ReportUnknown, consume.Report{Tenant: tn, TokenID: is.Token.ID, Generation: l.Generation, Actor: "holder"})
			if err != nil {
				e.t.Fatal(err)
			}
		}
	default:
		e.t.Fatalf("tokenIn(%q)", s)
	}
	switch s {
	case token.Revoked:
		if _, err := Revoke(ctx, e.pool, tn, is.Token.ID, Revocation{Reason: "setup", Actor: "test"}); err != nil {
			e.t.Fatal(err)
		}
	case token.Expired:
		e.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, is.Token.ID)
		if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	if got := e.state(tn, is.Token.ID); got != s {
		e.t.Fatalf("tokenIn(%q): token is %q", s, got)
	}
	is.Token.State = s
	return is
}

func (e *env) exec(sql string, args ...any) int64 {
	e.t.Helper()
	tag, err := e.pool.Exec(context.Background(), sql, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// state is the token's state, or "" when its row is gone.
func (e *env) state(tn, id string) token.State {
	e.t.Helper()
	var s token.State
	err := e.pool.QueryRow(context.Background(), `SELECT state FROM tokens WHERE tenant_id = $1 AND id = $2`, tn, id).Scan(&s)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) record(tn, id string) token.Record {
	e.t.Helper()
	r, err := inspect.Scan(e.pool.QueryRow(context.Background(), `SELECT `+inspect.Columns+` FROM tokens WHERE tenant_id = $1 AND id = $2`, tn, id))
	if err != nil {
		e.t.Fatalf("record %s: %v", id, err)
	}
	return r
}

// event is one audit row.
type event struct {
	Actor, Kind string
	From        *string
	To          string
	Generation  int64
	Detail      map[string]any
}

func (e *env) events(tn, id string) []event {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(),
		`SELECT actor, kind, from_state, to_state, generation, detail FROM token_events WHERE tenant_id = $1 AND token_id = $2 ORDER BY seq`, tn, id)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[event])
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

func (e *env) lastEvent(tn, id string) event {
	e.t.Helper()
	evs := e.events(tn, id)
	if len(evs) == 0 {
		e.t.Fatalf("token %s has no events", id)
	}
	return evs[len(evs)-1]
}

func (e *env) balance(tn string) int64 {
	e.t.Helper()
	b, err := ledger.Balance(context.Background(), e.pool, tn, "acc_1")
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// replays checks that a spend of is replays status and body byte for byte.
func (e *env) replays(is intent.Issued, status int, body []byte) {
	e.t.Helper()
	resp, err := e.spend(is)
	if err != nil {
		e.t.Fatalf("spend after reconcile: %v", err)
	}
	if !resp.Replayed || resp.Status != status || string(resp.Body) != string(body) {
		e.t.Errorf("spend = %d %s (replayed %v); want %d %s replayed", resp.Status, resp.Body, resp.Replayed, status, body)
	}
}
