package consume_test

import (
	"context"
	"encoding/json"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// writeCounter counts the writes to its connection: one per round trip,
// since pgx flushes once for each.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestSpendCostsThreeRoundTrips: Spend sends BEGIN with the lock and the
// outcome's write with COMMIT, so an atomic spend whose handler sends one
// statement (the ledger's credit) costs three round trips, not five.
func TestSpendCostsThreeRoundTrips(t *testing.T) {
	e := newEnv(t)
	pool, writes := countingPool(t)
	e.pool = pool

	first, second := e.issue("ledger.credit", "u1", credit("acct-1", 5)), e.issue("ledger.credit", "u1", credit("acct-1", 7))
	if _, err := e.spender.Spend(context.Background(), pool, e.spendReq(first, credit("acct-1", 5))); err != nil {
		t.Fatal(err)
	}
	before := writes.Load()
	resp, err := e.spender.Spend(context.Background(), pool, e.spendReq(second, credit("acct-1", 7)))
	if err != nil {
		t.Fatal(err)
	}
	if got := writes.Load() - before; got != 3 {
		t.Errorf("a spend took %d round trips, want 3", got)
	}
	if resp.State != token.Consumed || e.state(second.Token.ID) != token.Consumed {
		t.Errorf("state %s, stored %s; want consumed", resp.State, e.state(second.Token.ID))
	}
	if b, n := e.balance("acct-1"), e.entries("acct-1"); b != 12 || n != 2 {
		t.Errorf("balance %d over %d entries, want 12 over 2", b, n)
	}
}

// countingPool is a pool of one connection whose writes are counted.
func countingPool(t *testing.T) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(ledgertest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	writes := &atomic.Int64{}
	cfg.MaxConns = 1 // one connection, whose statements are prepared by a first use
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, n: writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, writes
}

// TestLeaseCostsThreeRoundTrips: a lease grant sends BEGIN with the lock and
// the grant with COMMIT (two round trips), and the holder's report is one
// statement in one (no BEGIN or COMMIT trips of its own): three for the
// pair, where it took six.
func TestLeaseCostsThreeRoundTrips(t *testing.T) {
	e := newEnv(t)
	pool, writes := countingPool(t)
	e.pool = pool
	e.declareLease(operation.OnExpiryTakeover)
	ctx := context.Background()

	// The first pair prepares the statements on the one connection.
	warm := e.issue(payOp, "alice", nil)
	l := e.grant(warm)
	if _, err := consume.Finish(ctx, pool, token.Complete, report(warm, l.Generation, "ok")); err != nil {
		t.Fatal(err)
	}

	is := e.issue(payOp, "alice", nil)
	before := writes.Load()
	resp, err := e.spender.Spend(ctx, pool, e.spendReq(is, map[string]any{"amount": 1}))
	if err != nil {
		t.Fatal(err)
	}
	granted := writes.Load()
	if got := granted - before; got != 2 {
		t.Errorf("a lease grant took %d round trips, want 2", got)
	}
	if resp.Status != http.StatusAccepted || resp.State != token.Pending || resp.Lease == nil ||
		resp.Generation != 1 || resp.Lease.Generation != 1 || resp.Lease.OperationID == "" || resp.Lease.ExpiresAt.IsZero() {
		t.Fatalf("grant = %d %s gen %d lease %+v", resp.Status, resp.State, resp.Generation, resp.Lease)
	}
	var body struct {
		TokenID     string      `json:"token_id"`
		State       token.State `json:"state"`
		Generation  int64       `json:"generation"`
		OperationID string      `json:"operation_id"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil || body.TokenID != is.Token.ID || body.State != token.Pending ||
		body.Generation != 1 || body.OperationID != resp.Lease.OperationID {
		t.Errorf("grant body %s (%v)", resp.Body, err)
	}
	if got := e.state(is.Token.ID); got != token.Pending {
		t.Errorf("stored %s after the grant, want pending", got)
	}

	before = writes.Load()
	done, err := consume.Finish(ctx, pool, token.Complete, report(is, resp.Lease.Generation, map[string]string{"capture": "cap_2"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := writes.Load() - before; got != 1 {
		t.Errorf("a complete took %d round trips, want 1", got)
	}
	if done.State != token.Consumed || done.Status != http.StatusOK || done.Replayed {
		t.Errorf("complete = %+v", done)
	}
	if got := e.state(is.Token.ID); got != token.Consumed {
		t.Errorf("stored %s after complete, want consumed", got)
	}
}
