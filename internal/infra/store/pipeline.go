package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pipelined is a transaction of its own connection that begins in the same
// round trip as its first statements and commits in the same round trip as
// its last ones. A spend that would cost BEGIN, lock, handler, finish and
// COMMIT as five round trips costs three; on a small machine each round trip
// is a write and a read system call on both sides, the largest part of a
// spend's CPU.
//
// Begin it with BeginPipelined, use Tx for the statements between, and end
// it with Commit or Rollback; Rollback after Commit does nothing, so it can
// be deferred.
type Pipelined struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
	done bool
}

// BeginPipelined acquires a connection from pool and sends BEGIN and first's
// statements in one round trip. The caller reads first's results from the
// returned BatchResults and must close them before using Tx. When the
// statements fail, the transaction is aborted: roll it back.
func BeginPipelined(ctx context.Context, pool *pgxpool.Pool, first func(*pgx.Batch)) (*Pipelined, pgx.BatchResults, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("acquire a connection: %w", err)
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	first(b)
	br := conn.SendBatch(ctx, b)
	p := &Pipelined{conn: conn, tx: br.Tx()}
	if _, err := br.Exec(); err != nil {
		br.Close()
		p.Rollback(context.WithoutCancel(ctx))
		return nil, nil, fmt.Errorf("begin: %w", err)
	}
	return p, br, nil
}

// Tx is the transaction, for the statements between the first and the last.
func (p *Pipelined) Tx() pgx.Tx { return p.tx }

// Commit sends last's statements, when it is not nil, and COMMIT in one
// round trip, and releases the connection. A statement queued with a result
// reader (QueuedQuery.QueryRow, Query or Exec) has it called in order, before
// COMMIT's result is read; an error of its own (a scan's, not the
// statement's) is returned, though COMMIT was sent with it and may have
// committed. It returns the first error of the statements, or
// pgx.ErrTxCommitRollback when the transaction had already failed, in which
// case nothing was committed.
func (p *Pipelined) Commit(ctx context.Context, last *pgx.Batch) error {
	if p.done {
		return pgx.ErrTxClosed
	}
	b := last
	if b == nil {
		b = &pgx.Batch{}
	}
	queued := b.QueuedQueries
	b.Queue("commit")
	br := p.tx.SendBatch(ctx, b)
	var err error
	for _, qq := range queued {
		// A statement queued with QueryRow, Query or Exec on its
		// QueuedQuery reads its own results (a RETURNING row, say).
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		tag, cerr := br.Exec()
		switch {
		case cerr != nil:
			err = fmt.Errorf("%w: %w", ErrCommitUnknown, cerr)
		case tag.String() == "ROLLBACK":
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The statements failed (COMMIT was then skipped) or the connection
		// broke: roll back what is left, if anything.
		p.Rollback(context.WithoutCancel(ctx))
		return err
	}
	// The server committed, so pgx's transaction object is not told: its
	// Commit would cost a round trip for a COMMIT that finds no transaction.
	// The connection is idle again and goes back to the pool.
	p.done = true
	p.conn.Release()
	return nil
}

// Rollback rolls the transaction back and releases the connection; after
// Commit it does nothing. A failed rollback closes the connection, which
// ends the transaction too.
func (p *Pipelined) Rollback(ctx context.Context) {
	if p.done {
		return
	}
	p.done = true
	if err := p.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		_ = p.conn.Conn().Close(ctx)
	}
	// Release destroys a connection that is closed or still in a transaction.
	p.conn.Release()
}
