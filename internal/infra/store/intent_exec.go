package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// Existing is the token holding an intent, as existingSQL and replaySQL
// read it.
type Existing struct {
	Record             token.Record
	Fingerprint, Nonce []byte
	KeyID              string
	Ignored            []string
	Forgotten          bool
}

// ReadExisting reads the token holding tenant's intent for operation, under
// its lock (existingSQL) when lock is true, else as of now (replaySQL). ok
// is false when there is none.
func ReadExisting(ctx context.Context, q db.DBTX, lock bool, tenant, operation, intentID string) (e Existing, ok bool, err error) {
	stmt := replaySQL
	if lock {
		stmt = existingSQL
	}
	r := &e.Record
	err = q.QueryRow(ctx, stmt, tenant, operation, intentID).Scan(&r.ID, &r.Subject, &r.State, &r.Generation, &r.PayloadDigest,
		&r.CreatedAt, &r.ExpiresAt, &r.RetainUntil,
		&e.Fingerprint, &e.Nonce, &e.KeyID, &e.Ignored, &e.Forgotten)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Existing{}, false, nil
	case err != nil:
		return Existing{}, false, fmt.Errorf("intent: read existing: %w", err)
	}
	return e, true, nil
}

// Forget purges a token whose intent retention has passed, recording its
// last event first (forgetEventSQL, forgetSQL; one round trip). tx holds
// the token's lock (existingSQL).
func Forget(ctx context.Context, tx pgx.Tx, tenant, id, actor string) error {
	b := &pgx.Batch{}
	b.Queue(forgetEventSQL, tenant, id, actor)
	b.Queue(forgetSQL, tenant, id)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("intent: forget expired intent: %w", err)
	}
	return nil
}

// Batcher is a db.DBTX that sends batches too: a pool, a connection or a
// transaction.
type Batcher interface {
	db.DBTX
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ErrStalePolicy: the policy an issue was built under is no longer the
// operation's (policyCurrentSQL); nothing was issued.
var ErrStalePolicy = errors.New("store: operation policy changed")

// IssueParams are an issue's parameters.
type IssueParams struct {
	Tenant, ID, Operation, IntentID, Subject string
	SecretHash, Nonce                        []byte
	KeyID                                    string
	Fingerprint, Digest                      []byte
	TTLSeconds, RetentionSeconds             int
	Actor                                    string
	PolicyVersion                            int64
	Mode, OnLeaseExpiry                      string
	LeaseSeconds                             int
	IgnoredFields                            []string
	EventOutcome                             bool
}

// Issued is an issue's answer: the inserted token's times, nil when the
// intent was taken.
type Issued struct {
	CreatedAt, ExpiresAt, RetainUntil *time.Time
}

// Issue claims an intent with a new token and records its event, provided
// the policy it was built under is still current, in one round trip
// (issueSQL, issueEventSQL, policyCurrentSQL). It answers ErrStalePolicy,
// having written nothing, when the policy changed.
//
// In a transaction the statements run inside a savepoint, queued in the
// same round trip, so that a stale policy rolls back only the issue and
// the caller's transaction goes on. Elsewhere (a pool) they run between a
// BEGIN and a COMMIT queued with them: not as the implicit transaction of
// a batch, which Citus does not keep (it sends a lone statement on one
// tenant to its worker to commit there by itself).
func Issue(ctx context.Context, q Batcher, p IssueParams) (Issued, error) {
	_, inTx := q.(pgx.Tx)
	if !inTx {
		if pool, ok := q.(*pgxpool.Pool); ok {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return Issued{}, fmt.Errorf("intent: acquire a connection: %w", err)
			}
			defer conn.Release()
			q = conn
		}
	}
	begin, end, undo := "BEGIN", "COMMIT", "ROLLBACK"
	if inTx {
		begin, end, undo = "SAVEPOINT tokend_issue", "RELEASE SAVEPOINT tokend_issue", "ROLLBACK TO SAVEPOINT tokend_issue"
	}
	b := &pgx.Batch{}
	b.Queue(begin)
	var out Issued
	b.Queue(issueSQL,
		p.Tenant, p.ID, p.Operation, p.IntentID, p.Subject,
		p.SecretHash, p.Nonce, p.KeyID, p.Fingerprint, p.Digest,
		p.TTLSeconds, p.RetentionSeconds,
		p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.IgnoredFields, p.EventOutcome,
	).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&out.CreatedAt, &out.ExpiresAt, &out.RetainUntil)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // the intent is taken
		}
		return err
	})
	b.Queue(issueEventSQL, p.Tenant, p.ID, p.Actor)
	b.Queue(policyCurrentSQL, p.Tenant, p.Operation, p.PolicyVersion)
	b.Queue(end)
	err := sendTx(ctx, q, b, !inTx)
	switch {
	case err == nil:
		return out, nil
	case isStalePolicy(err):
		if _, rerr := q.Exec(ctx, undo); rerr != nil {
			return Issued{}, fmt.Errorf("intent: roll back a stale issue: %w", rerr)
		}
		return Issued{}, ErrStalePolicy
	case !inTx:
		// Our own transaction: end it before the connection goes back. A
		// failed caller's transaction is the caller's to roll back.
		_, _ = q.Exec(context.WithoutCancel(ctx), undo)
	}
	return Issued{}, fmt.Errorf("intent: insert: %w", err)
}

// isStalePolicy says whether err is policyCurrentSQL's refusal.
func isStalePolicy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == stalePolicyCode
}

// stalePolicyCode is the SQLSTATE tokend_policy_current raises (migration
// 014).
const stalePolicyCode = "TD001"
