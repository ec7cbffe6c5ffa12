package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/token"
)

// ErrLockNotAvailable: the spend's bounded wait for its token's lock
// (lockBoundedSQL) ran out; another holder has the token.
var ErrLockNotAvailable = errors.New("store: token lock not available")

// Locked is a token row as a spend reads it under its lock (lockSQL), with
// the policy it was issued under.
type Locked struct {
	ID, Operation, Subject string
	KeyID                  string // the server key its secret derives from
	State                  token.State
	Generation             int64
	Digest                 []byte
	Expired                bool
	ResultStatus           *int
	ResultBody             []byte
	OperationID            *string
	LeaseLapsed            bool
	LeaseLeftSeconds       *int
	Mode                   string
	OnLeaseExpiry          string
	LeaseSeconds           int
	IgnoredFields          []string
}

// QueueLock queues the locking read of the token whose secret hashes to
// hash, with the wait bound (for this transaction only) when lockWait is
// not "".
func QueueLock(b *pgx.Batch, tenant string, hash []byte, lockWait string) {
	if lockWait != "" {
		b.Queue(lockBoundedSQL, tenant, hash, lockWait)
		return
	}
	b.Queue(lockSQL, tenant, hash)
}

// ReadLock reads the result of QueueLock's statement, the first of br, and
// closes br: token.ErrNotFound when no token has the secret,
// ErrLockNotAvailable when the wait ran out.
func ReadLock(br pgx.BatchResults) (*Locked, error) {
	t, err := scanLock(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = lockError(cerr)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// LockTx is QueueLock and ReadLock in tx: the locking read of the token
// whose secret hashes to hash.
func LockTx(ctx context.Context, tx pgx.Tx, tenant string, hash []byte, lockWait string) (*Locked, error) {
	b := &pgx.Batch{}
	QueueLock(b, tenant, hash, lockWait)
	return ReadLock(tx.SendBatch(ctx, b))
}

func scanLock(br pgx.BatchResults) (*Locked, error) {
	t := &Locked{}
	err := br.QueryRow().Scan(&t.ID, &t.Operation, &t.Subject, &t.KeyID, &t.State, &t.Generation, &t.Digest, &t.Expired,
		&t.ResultStatus, &t.ResultBody, &t.OperationID, &t.LeaseLapsed, &t.LeaseLeftSeconds,
		&t.Mode, &t.OnLeaseExpiry, &t.LeaseSeconds, &t.IgnoredFields)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, token.ErrNotFound
	}
	if err != nil {
		return nil, lockError(err)
	}
	return t, nil
}

// lockError is err, from the lock's statement or its batch, as a spend
// reports it: ErrLockNotAvailable for a lock wait that ran out.
func lockError(err error) error {
	if LockNotAvailable(err) {
		return fmt.Errorf("%w: %w", ErrLockNotAvailable, err)
	}
	return fmt.Errorf("consume: lock token: %w", err)
}

// Lapse records that a pending token's lease lapsed into unknown (lapseSQL).
func Lapse(ctx context.Context, tx pgx.Tx, tenant, id, actor string) error {
	if _, err := lapseSQL.Exec(ctx, tx, Moved{Tenant: tenant, ID: id, Actor: actor}, tenant, id); err != nil {
		return fmt.Errorf("consume: lease lapse: %w", err)
	}
	return nil
}

// FinishParams is an atomic spend's outcome, as finishSQL stores it.
type FinishParams struct {
	Tenant, TokenID string
	To              token.State
	Status          int
	Body            []byte
	Actor           string
	Action          token.Action
	From            token.State
}

// Finish stores an atomic spend's outcome and its event (finishSQL): queued
// on last to go with the COMMIT when last is not nil, at once in tx
// otherwise.
func Finish(ctx context.Context, tx pgx.Tx, last *pgx.Batch, p FinishParams) error {
	m := Moved{Tenant: p.Tenant, ID: p.TokenID, Actor: p.Actor, Kind: string(p.Action), From: string(p.From)}
	args := []any{p.Tenant, p.TokenID, p.To, p.Status, p.Body}
	if last != nil {
		finishSQL.Queue(last, m, args...)
		return nil
	}
	if _, err := finishSQL.Exec(ctx, tx, m, args...); err != nil {
		return fmt.Errorf("consume: store outcome: %w", err)
	}
	return nil
}
