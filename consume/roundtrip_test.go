package consume_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/pgtest"
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
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	cfg.MaxConns = 1 // one connection, whose statements are prepared by the first spend
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, n: &writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
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
