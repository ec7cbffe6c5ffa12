package consume_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const tenant = "acme"

// env is a fresh database with an issuer and a spender wired to the ledger.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	issuer  *intent.Issuer
	spender *consume.Spender
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, consume.Config{})
}

func newEnvWith(t *testing.T, cfg consume.Config) *env {
	t.Helper()
	k := ledgertest.New(t, tokentest.Options{Handlers: cfg.Handlers, LockWait: cfg.LockWait})
	return &env{t: t, pool: k.Pool, issuer: k.Issuer, spender: k.Spender}
}

func (e *env) issue(op, subject string, payload any) intent.Issued {
	e.t.Helper()
	req := intent.Request{Tenant: tenant, Operation: op, IntentID: token.NewID(), Subject: subject, TTLSeconds: 600, Actor: "test"}
	if payload != nil {
		req.Payload = mustJSON(e.t, payload)
	}
	out, err := e.issuer.Issue(context.Background(), e.pool, req)
	if err != nil {
		e.t.Fatalf("issue: %v", err)
	}
	return out
}

func (e *env) spendReq(is intent.Issued, payload any) consume.Request {
	return consume.Request{
		Tenant: tenant, Secret: is.Secret, Operation: is.Token.Operation,
		Subject: is.Token.Subject, Payload: mustJSON(e.t, payload), Actor: "test",
	}
}

func (e *env) state(id string) token.State {
	e.t.Helper()
	var s token.State
	if err := e.pool.QueryRow(context.Background(), `SELECT state FROM tokens WHERE tenant_id = $1 AND id = $2`, tenant, id).Scan(&s); err != nil {
		e.t.Fatalf("state of %s: %v", id, err)
	}
	return s
}

func (e *env) balance(account string) int64 {
	e.t.Helper()
	b, err := ledger.Balance(context.Background(), e.pool, tenant, account)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *env) entries(account string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_entries WHERE tenant_id = $1 AND account = $2`, tenant, account).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func credit(account string, amount int64) map[string]any {
	return map[string]any{"account": account, "amount": amount}
}

func TestSpendCreditsOnceAndReplaysByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.issue(ledger.Credit, "alice", credit("alice", 10))

	first, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("alice", 10)))
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != http.StatusOK || first.State != token.Consumed || first.Replayed {
		t.Fatalf("first spend = %d %s replayed=%v", first.Status, first.State, first.Replayed)
	}
	var body struct {
		TokenID string         `json:"token_id"`
		State   string         `json:"state"`
		Result  ledger.Account `json:"result"`
	}
	if err := json.Unmarshal(first.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.TokenID != is.Token.ID || body.State != "consumed" || body.Result.Balance != 10 {
		t.Fatalf("body = %s", first.Body)
	}

	// The response was lost; the client retries with the same token.
	again, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("alice", 10)))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("retry = %d %s replayed=%v, want replay of %s", again.Status, again.Body, again.Replayed, first.Body)
	}
	if got := e.balance("alice"); got != 10 {
		t.Fatalf("balance = %d, want 10", got)
	}
	if got := e.entries("alice"); got != 1 {
		t.Fatalf("ledger entries = %d, want 1", got)
	}
}

func TestSpendConcurrentExecutesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	is := e.issue(ledger.Credit, "bob", credit("bob", 7))

	const n = 100
	var (
		wg                          sync.WaitGroup
		mu                          sync.Mutex
		executed, replayed, waiting int
		bodies                      = map[string]bool{}
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := e.spender.Spend(context.Background(), e.pool, e.spendReq(is, credit("bob", 7)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, token.ErrInProgress):
				waiting++
			case err != nil:
				t.Errorf("spend: %v", err)
			case resp.Replayed:
				replayed++
				bodies[string(resp.Body)] = true
			default:
				executed++
				bodies[string(resp.Body)] = true
			}
		}()
	}
	close(start)
	wg.Wait()

	t.Logf("executed=%d replayed=%d in_progress=%d", executed, replayed, waiting)
	if executed != 1 {
		t.Fatalf("%d spends executed, want exactly 1", executed)
	}
	if executed+replayed+waiting != n {
		t.Fatalf("only %d of %d spends answered", executed+replayed+waiting, n)
	}
	if len(bodies) != 1 {
		t.Fatalf("%d different bodies seen, want the one stored outcome", len(bodies))
	}
	if got := e.balance("bob"); got != 7 {
		t.Fatalf("balance = %d, want 7 (one effect)", got)
	}
	if got := e.entries("bob"); got != 1 {
		t.Fatalf("ledger entries = %d, want 1", got)
	}
}

func TestSpendRejectsWithoutChangingToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	bound := e.issue(ledger.Credit, "carol", credit("carol", 5))
	unbound := e.issue(ledger.Credit, "carol", nil)

	tests := []struct {
		name   string
		is     intent.Issued
		mutate func(*consume.Request)
		want   error
	}{
		{"other subject", bound, func(r *consume.Request) { r.Subject = "mallory" }, consume.ErrBindingMismatch},
		{"other operation", bound, func(r *consume.Request) { r.Operation = ledger.Debit }, consume.ErrBindingMismatch},
		{"other tenant", bound, func(r *consume.Request) { r.Tenant = "other" }, token.ErrNotFound},
		{"changed amount", bound, func(r *consume.Request) { r.Payload = mustJSON(t, credit("carol", 500)) }, consume.ErrPayloadMismatch},
		{"changed account", bound, func(r *consume.Request) { r.Payload = mustJSON(t, credit("mallory", 5)) }, consume.ErrPayloadMismatch},
		{"no payload", bound, func(r *consume.Request) { r.Payload = nil }, consume.ErrPayloadMissing},
		{"malformed payload", bound, func(r *consume.Request) { r.Payload = []byte(`{"account":`) }, consume.ErrInvalidPayload},
		{"negative amount", unbound, func(r *consume.Request) { r.Payload = mustJSON(t, credit("carol", -5)) }, consume.ErrInvalidPayload},
		{"unknown field", unbound, func(r *consume.Request) { r.Payload = []byte(`{"account":"carol","amount":5,"admin":true}`) }, consume.ErrInvalidPayload},
		{"fractional amount", unbound, func(r *consume.Request) { r.Payload = []byte(`{"account":"carol","amount":1.5}`) }, consume.ErrInvalidPayload},
		{"unknown secret", bound, func(r *consume.Request) {
			other := e.issue(ledger.Credit, "carol", nil)
			e.exec(`DELETE FROM tokens WHERE id = $1`, other.Token.ID)
			r.Secret = other.Secret
		}, token.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := e.spendReq(tc.is, credit("carol", 5))
			tc.mutate(&req)
			_, err := e.spender.Spend(ctx, e.pool, req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if s := e.state(tc.is.Token.ID); s != token.Issued {
				t.Fatalf("token is %s after a rejected spend, want issued", s)
			}
		})
	}
	if got := e.balance("carol") + e.balance("mallory"); got != 0 {
		t.Fatalf("balances moved by %d after rejected spends", got)
	}
	// Both tokens are still good for exactly one spend.
	for _, is := range []intent.Issued{bound, unbound} {
		if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("carol", 5))); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.balance("carol"); got != 10 {
		t.Fatalf("balance = %d, want 10", got)
	}
}

func TestSpendIgnoresDeclaredIgnoredFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	is := e.issue(ledger.Credit, "dave", map[string]any{"account": "dave", "amount": 3, "trace_id": "issue-trace"})
	req := e.spendReq(is, map[string]any{"trace_id": "spend-trace", "amount": 3, "account": "dave"})
	if _, err := e.spender.Spend(context.Background(), e.pool, req); err != nil {
		t.Fatalf("spend with another trace_id: %v", err)
	}
	if got := e.balance("dave"); got != 3 {
		t.Fatalf("balance = %d, want 3", got)
	}
}

func TestSpendExpiryByDatabaseClock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		expires string // relative to the database's now()
		want    error
	}{
		{"just before expiry", "now() + interval '2 seconds'", nil},
		{"at expiry", "now()", token.ErrExpired},
		{"after expiry", "now() - interval '1 second'", token.ErrExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			is := e.issue(ledger.Credit, "erin", nil)
			// Set expiry and spend in one transaction, so now() is the same instant.
			err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE tokens SET expires_at = `+tc.expires+` WHERE id = $1`, is.Token.ID); err != nil {
					return err
				}
				_, err := e.spender.SpendTx(ctx, tx, e.spendReq(is, credit("erin", 1)))
				return err
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			want := int64(0)
			if tc.want == nil {
				want = 1
			}
			if got := e.balance("erin"); got != want {
				t.Fatalf("balance = %d, want %d", got, want)
			}
		})
	}
}

func TestSpendFinalFailureIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.issue(ledger.Debit, "frank", credit("frank", 50))

	first, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("frank", 50)))
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != http.StatusUnprocessableEntity || first.State != token.Failed {
		t.Fatalf("debit of an empty account = %d %s, want 422 failed", first.Status, first.State)
	}
	// Funds arriving later do not turn the stored failure into a success.
	e.exec(`INSERT INTO ledger_accounts (tenant_id, account, balance) VALUES ($1, 'frank', 100)`, tenant)
	again, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("frank", 50)))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || !bytes.Equal(again.Body, first.Body) || again.Status != first.Status {
		t.Fatalf("retry = %d %s, want replay of %s", again.Status, again.Body, first.Body)
	}
	if got := e.balance("frank"); got != 100 {
		t.Fatalf("balance = %d, want 100 untouched", got)
	}
}

func TestSpendCrashBeforeCommitLeavesTokenIssued(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	is := e.issue(ledger.Credit, "gina", credit("gina", 4))

	// A process that dies between running the handler and committing: its
	// connection goes away mid-transaction.
	conn, err := pgx.Connect(context.Background(), e.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.spender.SpendTx(context.Background(), tx, e.spendReq(is, credit("gina", 4)))
	if err != nil || resp.State != token.Consumed {
		t.Fatalf("spend in doomed tx = %v %v", resp.State, err)
	}
	if err := conn.PgConn().Conn().Close(); err != nil { // no COMMIT, no ROLLBACK: the socket just dies
		t.Fatal(err)
	}

	// Postgres rolls the transaction back; the token is spendable exactly once more.
	deadline := time.Now().Add(10 * time.Second)
	for e.state(is.Token.ID) != token.Issued && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := e.state(is.Token.ID); s != token.Issued {
		t.Fatalf("token is %s after the crash, want issued", s)
	}
	if got := e.balance("gina"); got != 0 {
		t.Fatalf("balance = %d after the crash, want 0", got)
	}
	if _, err := e.spender.Spend(context.Background(), e.pool, e.spendReq(is, credit("gina", 4))); err != nil {
		t.Fatal(err)
	}
	if got := e.balance("gina"); got != 4 {
		t.Fatalf("balance = %d, want 4", got)
	}
}

func TestSpendTxRollbackLeavesTokenSpendable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.issue(ledger.Credit, "hank", nil)

	errBusiness := errors.New("caller's own update failed")
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := e.spender.SpendTx(ctx, tx, e.spendReq(is, credit("hank", 9))); err != nil {
			return err
		}
		return errBusiness // the caller's business update fails after the spend
	})
	if !errors.Is(err, errBusiness) {
		t.Fatalf("err = %v", err)
	}
	if s := e.state(is.Token.ID); s != token.Issued {
		t.Fatalf("token is %s after rollback, want issued", s)
	}
	if got := e.balance("hank"); got != 0 {
		t.Fatalf("balance = %d after rollback, want 0", got)
	}
	if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("hank", 9))); err != nil {
		t.Fatal(err)
	}
	if got := e.balance("hank"); got != 9 {
		t.Fatalf("balance = %d, want 9", got)
	}
}

func TestSpendWaitIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, consume.Config{LockWait: 50 * time.Millisecond})
	ctx := context.Background()
	is := e.issue(ledger.Credit, "ivan", nil)

	holder, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `SELECT 1 FROM tokens WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, is.Token.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("ivan", 1)))
	var ip *consume.InProgressError
	if !errors.As(err, &ip) || !errors.Is(err, token.ErrInProgress) || ip.RetryAfterSeconds < 1 {
		t.Fatalf("err = %v, want in progress with a retry hint", err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, credit("ivan", 1))); err != nil {
		t.Fatalf("spend after the holder let go: %v", err)
	}
}

func TestSpendUnknownOperationAndMissingHandler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnvWith(t, consume.Config{Handlers: consume.NewRegistry()}) // no ledger handlers
	// Declared by a server that has a handler for it; spent by one that has none.
	elsewhere := consume.NewRegistry()
	elsewhere.Register("shop.order", consume.HandlerFunc(nil))
	if _, err := operation.Put(ctx, e.pool, tenant, operation.Policy{Name: "shop.order", Mode: operation.Atomic}, elsewhere); err != nil {
		t.Fatal(err)
	}
	is := e.issue("shop.order", "judy", nil)
	_, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"sku": "x"}))
	if !errors.Is(err, consume.ErrNoHandler) {
		t.Fatalf("err = %v, want ErrNoHandler", err)
	}
	if s := e.state(is.Token.ID); s != token.Issued {
		t.Fatalf("token is %s, want issued", s)
	}
}

func TestSpendAuditTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	is := e.issue(ledger.Credit, "kim", nil)
	if _, err := e.spender.Spend(context.Background(), e.pool, e.spendReq(is, credit("kim", 2))); err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(context.Background(), `SELECT kind || ':' || coalesce(from_state, '-') || '>' || to_state FROM token_events WHERE token_id = $1 ORDER BY seq`, is.Token.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "[issued:->issued spend:issued>consumed]"; fmt.Sprint(got) != want {
		t.Fatalf("events = %v, want %s", got, want)
	}
}

// A handler answering a status that cannot be replayed byte for byte (no
// body allowed, or neither a success nor a failure) is a handler bug: the
// spend fails, nothing is stored, and the token stays spendable.
func TestSpendRefusesUnreplayableHandlerStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []int{0, 101, 204, 205, 302, 304, 600} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			handlers := consume.NewRegistry()
			handlers.Register("shop.order", consume.HandlerFunc(func(ctx context.Context, tx pgx.Tx, c consume.Call) (consume.Outcome, error) {
				_, err := tx.Exec(ctx, `CREATE TABLE effect (n int)`) // rolled back with the spend
				return consume.Outcome{Status: status, Result: map[string]string{"order": "o_1"}}, err
			}))
			e := newEnvWith(t, consume.Config{Handlers: handlers})
			ctx := context.Background()
			if _, err := operation.Put(ctx, e.pool, tenant, operation.Policy{Name: "shop.order", Mode: operation.Atomic}, handlers); err != nil {
				t.Fatal(err)
			}
			is := e.issue("shop.order", "hana", nil)
			before := e.row(is.Token.ID)
			resp, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, nil))
			if err == nil || errors.Is(err, consume.ErrInvalidPayload) || errors.Is(err, token.ErrInvalidStatus) {
				t.Fatalf("spend with handler status %d = %d %s, %v; want a server error", status, resp.Status, resp.Body, err)
			}
			if got := e.row(is.Token.ID); got != before || got.State != token.Issued || got.Status != 0 {
				t.Errorf("after the refused spend the token is %+v, want %+v", got, before)
			}
			var effect bool
			if err := e.pool.QueryRow(ctx, `SELECT to_regclass('effect') IS NOT NULL`).Scan(&effect); err != nil || effect {
				t.Errorf("the handler's effect survived: %v %v", effect, err)
			}
		})
	}
}
