package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestPipelined: what a pipelined transaction commits is exactly what a
// plain one would: everything when all statements pass, nothing when one of
// the last ones fails, when an earlier one failed, or on rollback; and the
// connection goes back to the pool usable every time.
func TestPipelined(t *testing.T) {
	t.Parallel()
	insert := func(n int) func(*pgx.Batch) {
		return func(b *pgx.Batch) { b.Queue(`INSERT INTO pipe (n) VALUES ($1)`, n) }
	}
	cases := []struct {
		name    string
		middle  string // run with Tx between the first and the last statements
		last    []int  // inserted with COMMIT
		commit  bool   // false: roll back instead
		wantErr bool   // the commit must fail
		want    int    // rows committed
	}{
		{name: "commit", last: []int{2, 3}, commit: true, want: 3},
		{name: "commit without last statements", commit: true, want: 1},
		{name: "last statement fails", last: []int{2, 1}, commit: true, wantErr: true, want: 0},
		{name: "middle statement failed", middle: `SELECT 1/0`, last: []int{2}, commit: true, wantErr: true, want: 0},
		{name: "rollback", commit: false, want: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1 // a connection left in a transaction would block the checks below
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if _, err := pool.Exec(ctx, `CREATE TABLE pipe (n int PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}

			p, br, err := store.BeginPipelined(ctx, pool, insert(1))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := br.Exec(); err != nil {
				t.Fatal(err)
			}
			if err := br.Close(); err != nil {
				t.Fatal(err)
			}
			if c.middle != "" {
				if _, err := p.Tx().Exec(ctx, c.middle); err == nil {
					t.Fatalf("%s did not fail", c.middle)
				}
			}
			if c.commit {
				var last *pgx.Batch
				if c.last != nil {
					last = &pgx.Batch{}
					for _, n := range c.last {
						insert(n)(last)
					}
				}
				err = p.Commit(ctx, last)
			} else {
				p.Rollback(ctx)
			}
			switch {
			case !c.wantErr && err != nil:
				t.Fatalf("commit: %v", err)
			case c.wantErr && err == nil:
				t.Fatal("commit succeeded, want an error")
			}
			p.Rollback(ctx) // after Commit or Rollback: nothing

			var got int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pipe`).Scan(&got); err != nil {
				t.Fatalf("the pool's connection is not usable afterwards: %v", err)
			}
			if got != c.want {
				t.Errorf("%d rows committed, want %d", got, c.want)
			}
		})
	}
}

// TestPipelinedFirstStatementFails: a failing first statement leaves a
// transaction to roll back, and nothing behind.
func TestPipelinedFirstStatementFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p, br, err := store.BeginPipelined(ctx, pool, func(b *pgx.Batch) { b.Queue(`SELECT 1/0`) })
	if err != nil {
		t.Fatal(err)
	}
	_, err = br.Exec()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Errorf("first statement: %v, want division_by_zero", err)
	}
	br.Close()
	if err := p.Commit(ctx, nil); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("commit after a failed statement: %v, want pgx.ErrTxCommitRollback", err)
	}
	if err := pool.QueryRow(ctx, `SELECT 1`).Scan(new(int)); err != nil {
		t.Errorf("pool unusable afterwards: %v", err)
	}
}

// TestPipelinedCommitReadsReturningRows: a last statement queued with a row
// reader has its RETURNING row read, in order, and the reader's error is
// Commit's.
func TestPipelinedCommitReadsReturningRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE pipe_ret (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	p, br, err := store.BeginPipelined(ctx, pool, func(*pgx.Batch) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	var got []int
	last := &pgx.Batch{}
	for _, n := range []int{4, 5} {
		last.Queue(`INSERT INTO pipe_ret (n) VALUES ($1) RETURNING n * 10`, n).QueryRow(func(row pgx.Row) error {
			var v int
			err := row.Scan(&v)
			got = append(got, v)
			return err
		})
	}
	last.Queue(`INSERT INTO pipe_ret (n) VALUES (6)`)
	if err := p.Commit(ctx, last); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 40 || got[1] != 50 {
		t.Errorf("rows read %v, want [40 50]", got)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pipe_ret`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows committed (%v), want 3", n, err)
	}

	// A failing statement with a reader fails the commit; nothing commits.
	p, br, err = store.BeginPipelined(ctx, pool, func(*pgx.Batch) {})
	if err != nil {
		t.Fatal(err)
	}
	br.Close()
	last = &pgx.Batch{}
	last.Queue(`INSERT INTO pipe_ret (n) VALUES (7)`)
	last.Queue(`INSERT INTO pipe_ret (n) VALUES (4) RETURNING n`).QueryRow(func(row pgx.Row) error { return row.Scan(new(int)) })
	var pgErr *pgconn.PgError
	if err := p.Commit(ctx, last); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Errorf("commit with a duplicate: %v, want unique_violation", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pipe_ret`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows after the failed commit (%v), want 3", n, err)
	}
}

// TestFailedCommitIsUnknownOutcome: when the statements ran and the COMMIT
// sent with them fails, the error says the outcome is unknown (a retry
// finds out), for a pipelined spend's commit and for a Step run alone; a
// failing statement before it is its own error. A deferred constraint
// makes the COMMIT fail here; on Citus a worker that fails to commit does.
func TestFailedCommitIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	pool, ctx := pgtest.NewPool(t), context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE once (k int, UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	p, br, err := store.BeginPipelined(ctx, pool, func(b *pgx.Batch) {})
	if err != nil {
		t.Fatal(err)
	}
	br.Close()
	last := &pgx.Batch{}
	last.Queue(`INSERT INTO once VALUES (1), (1)`)
	if err := p.Commit(ctx, last); !errors.Is(err, store.ErrCommitUnknown) {
		t.Errorf("pipelined commit failing at COMMIT: err = %v, want ErrCommitUnknown", err)
	}
	p, br, err = store.BeginPipelined(ctx, pool, func(b *pgx.Batch) {})
	if err != nil {
		t.Fatal(err)
	}
	br.Close()
	last = &pgx.Batch{}
	last.Queue(`SELECT 1/0`)
	if err := p.Commit(ctx, last); err == nil || errors.Is(err, store.ErrCommitUnknown) {
		t.Errorf("pipelined commit failing before COMMIT: err = %v, want the statement's own", err)
	}
	twice := store.Step{
		Change: `INSERT INTO once SELECT 2 FROM generate_series(1, 2) WHERE $1::bigint IS NOT NULL`,
		Record: `SELECT $1::text, $2::text, $3::bigint, $4::text, $5::text, $6::text`,
	}
	if _, err := twice.ExecAlone(ctx, pool, store.Moved{Tenant: "t", ID: "tok", Actor: "a", Kind: "k", From: "f"}); !errors.Is(err, store.ErrCommitUnknown) {
		t.Errorf("a Step alone failing at COMMIT: err = %v, want ErrCommitUnknown", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM once`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows, %v; want none", n, err)
	}
}
