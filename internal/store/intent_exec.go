package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// Existing is the token holding an intent, as ExistingSQL and ReplaySQL
// read it.
type Existing struct {
	Record             token.Record
	Fingerprint, Nonce []byte
	KeyID              string
	Ignored            []string
	Forgotten          bool
}

// ReadExisting reads the token holding tenant's intent for operation, under
// its lock (ExistingSQL) when lock is true, else as of now (ReplaySQL). ok
// is false when there is none.
func ReadExisting(ctx context.Context, q db.DBTX, lock bool, tenant, operation, intentID string) (e Existing, ok bool, err error) {
	stmt := ReplaySQL
	if lock {
		stmt = ExistingSQL
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

// Forget purges a token whose intent retention has passed (ForgetSQL).
func Forget(ctx context.Context, tx pgx.Tx, tenant, id, actor string) error {
	if _, err := tx.Exec(ctx, ForgetSQL, tenant, id, actor); err != nil {
		return fmt.Errorf("intent: forget expired intent: %w", err)
	}
	return nil
}

// IssueParams are IssueSQL's parameters, in its order.
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

// Issued is what IssueSQL answers: whether the policy was still current,
// and the inserted token's times, nil when the intent was taken (or the
// policy changed).
type Issued struct {
	Current                           bool
	CreatedAt, ExpiresAt, RetainUntil *time.Time
}

// Issue claims an intent with a new token (IssueSQL).
func Issue(ctx context.Context, q db.DBTX, p IssueParams) (Issued, error) {
	var out Issued
	err := q.QueryRow(ctx, IssueSQL,
		p.Tenant, p.ID, p.Operation, p.IntentID, p.Subject,
		p.SecretHash, p.Nonce, p.KeyID, p.Fingerprint, p.Digest,
		p.TTLSeconds, p.RetentionSeconds, p.Actor, p.PolicyVersion,
		p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.IgnoredFields, p.EventOutcome,
	).Scan(&out.Current, &out.CreatedAt, &out.ExpiresAt, &out.RetainUntil)
	if err != nil {
		return Issued{}, fmt.Errorf("intent: insert: %w", err)
	}
	return out, nil
}
