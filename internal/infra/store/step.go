package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Step is a transition of one token as two statements on its tenant, run
// in one transaction: Change moves the token and stamps it with a random
// transition id, its last parameter; Record then inserts the event of the
// token carrying that id, read from the token's row (recordSQL). Nothing
// is recorded when Change matched no row.
//
// Two statements rather than one (a CTE feeding the event's INSERT, as
// Transition renders): Citus runs each of these on the worker holding the
// tenant and commits the transaction there in one phase, while it ran the
// CTE through the coordinator and committed with two phases. A worker
// restarting between the two phases left an answered change invisible (a
// spend answered 200, the token still issued) until Citus recovered it.
type Step struct {
	Change string
	Record string
	// Kind and From are the event's kind and the state moved from, when the
	// step always records the same; else the caller's Moved gives them.
	Kind, From string
}

// Moved is what a Step's event says beyond the token's row: which token,
// who moved it, and, when the Step leaves them to the caller, the kind and
// the state it moved from. Extra are Record's parameters after the sixth.
type Moved struct {
	Tenant, ID, Actor string
	Kind, From        string
	Extra             []any
}

// step renders a Step: change must set transition_id to its last
// parameter; detail is the event's detail, an expression over the token's
// row and Record's parameters after the sixth ("" for none); outcome says
// whether the event carries the token's outcome.
func step(kind, from, change, detail string, outcome bool) Step {
	e := Event{Actor: "$4", Kind: "$5", From: "$6", To: "state", Detail: detail}
	if outcome {
		// Only what the token's policy (event_outcome) lets events carry.
		e.OutcomeStatus, e.OutcomeBody = "result_status", "CASE WHEN event_outcome THEN result_body END"
	}
	return Step{
		Change: change,
		Record: recordSQL("tenant_id = $1 AND id = $2 AND transition_id = $3", e),
		Kind:   kind, From: from,
	}
}

// Queue queues s on b, the change with args and then a new transition id,
// and returns the change's queued query, for its result.
func (s Step) Queue(b *pgx.Batch, m Moved, args ...any) *pgx.QueuedQuery {
	tid := rand.Int64()
	q := b.Queue(s.Change, append(args, tid)...)
	b.Queue(s.Record, append([]any{m.Tenant, m.ID, tid, m.Actor, cmp.Or(m.Kind, s.Kind), cmp.Or(m.From, s.From)}, m.Extra...)...)
	return q
}

// Exec runs s in tx, in one round trip, and answers the change's command
// tag.
func (s Step) Exec(ctx context.Context, tx pgx.Tx, m Moved, args ...any) (pgconn.CommandTag, error) {
	b := &pgx.Batch{}
	var tag pgconn.CommandTag
	s.Queue(b, m, args...).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	return tag, tx.SendBatch(ctx, b).Close()
}

// QueryRow runs s in tx, in one round trip, scanning the change's one row
// with scan (pgx.ErrNoRows when it matched none).
func (s Step) QueryRow(ctx context.Context, tx pgx.Tx, scan func(pgx.Row) error, m Moved, args ...any) error {
	b := &pgx.Batch{}
	s.Queue(b, m, args...).QueryRow(scan)
	return tx.SendBatch(ctx, b).Close()
}

// Run runs s in q when q is a transaction (Exec), else as a transaction of
// its own on q, a pool (ExecAlone).
func (s Step) Run(ctx context.Context, q Batcher, m Moved, args ...any) (pgconn.CommandTag, error) {
	switch q := q.(type) {
	case pgx.Tx:
		return s.Exec(ctx, q, m, args...)
	case *pgxpool.Pool:
		return s.ExecAlone(ctx, q, m, args...)
	}
	return pgconn.CommandTag{}, fmt.Errorf("store: %T is neither a transaction nor a pool", q)
}

// ExecAlone runs s as a transaction of its own on pool, BEGIN and COMMIT
// queued with it in one round trip, and answers the change's command tag.
// Not the implicit transaction of a batch: Citus does not keep it (it sends
// a lone statement on one tenant to its worker to commit by itself).
func (s Step) ExecAlone(ctx context.Context, pool *pgxpool.Pool, m Moved, args ...any) (pgconn.CommandTag, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	var tag pgconn.CommandTag
	s.Queue(b, m, args...).Exec(func(ct pgconn.CommandTag) error {
		tag = ct
		return nil
	})
	b.Queue("COMMIT")
	if err := sendTx(ctx, conn, b, true); err != nil {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return pgconn.CommandTag{}, err
	}
	return tag, nil
}

// ErrCommitUnknown: a COMMIT sent with its statements failed to answer, so
// the transaction may or may not have committed (the connection broke, or
// Citus could not commit on the worker). The request is to be retried:
// with the same intent or token, the retry finds what happened.
var ErrCommitUnknown = errors.New("store: commit outcome unknown")

// sendTx sends b, whose first statement begins a transaction or savepoint
// and whose last ends it, reading the results in order. When commit is
// true an error of the last statement, the COMMIT, is ErrCommitUnknown.
func sendTx(ctx context.Context, q Batcher, b *pgx.Batch, commit bool) error {
	queued := b.QueuedQueries
	br := q.SendBatch(ctx, b)
	var err error
	for i, qq := range queued {
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			if commit && i == len(queued)-1 {
				err = fmt.Errorf("%w: %w", ErrCommitUnknown, err)
			}
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
