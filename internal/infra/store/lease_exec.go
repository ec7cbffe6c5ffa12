package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// LeaseParams are a lease grant's parameters (leaseSQL).
type LeaseParams struct {
	Tenant, TokenID string
	LeaseSeconds    int
	OperationID     string // kept if the token has one already
	Actor           string
	Action          token.Action // token.Lease or token.Takeover
	From            token.State
}

// Leased is what a lease grant answers: the new generation, the lease's end
// by the database clock (in UTC) and the downstream operation id.
type Leased struct {
	Generation  int64
	ExpiresAt   time.Time
	OperationID string
}

// Lease grants a lease (leaseSQL) and reads its answer into out: queued on
// last to go with the COMMIT when last is not nil (out is filled when the
// batch is read), at once in tx otherwise.
func Lease(ctx context.Context, tx pgx.Tx, last *pgx.Batch, p LeaseParams, out *Leased) error {
	m := Moved{Tenant: p.Tenant, ID: p.TokenID, Actor: p.Actor, Kind: string(p.Action), From: string(p.From)}
	args := []any{p.Tenant, p.TokenID, p.LeaseSeconds, p.OperationID}
	scan := func(row pgx.Row) error {
		if err := row.Scan(&out.Generation, &out.ExpiresAt, &out.OperationID); err != nil {
			return fmt.Errorf("consume: grant lease: %w", err)
		}
		out.ExpiresAt = out.ExpiresAt.UTC()
		return nil
	}
	if last != nil {
		leaseSQL.Queue(last, m, args...).QueryRow(scan)
		return nil
	}
	return leaseSQL.QueryRow(ctx, tx, scan, m, args...)
}

// ReportParams are a lease holder's report as finishLeaseSQL and
// reportUnknownSQL store it; To, Status and Body are unused by
// token.ReportUnknown, which stores no outcome.
type ReportParams struct {
	Tenant, TokenID string
	Generation      int64
	Action          token.Action // token.Complete, token.Fail or token.ReportUnknown
	To              token.State
	Status          int
	Body            []byte
	Actor           string
}

// Report records a lease holder's report (finishLeaseSQL, or
// reportUnknownSQL for token.ReportUnknown) if the token is pending at
// p.Generation; recorded is false when it changed nothing (ReadReportState
// tells why).
func Report(ctx context.Context, q Batcher, p ReportParams) (recorded bool, err error) {
	m := Moved{Tenant: p.Tenant, ID: p.TokenID, Actor: p.Actor}
	var tag pgconn.CommandTag
	if p.Action == token.ReportUnknown {
		tag, err = reportUnknownSQL.Run(ctx, q, m, p.Tenant, p.TokenID, p.Generation)
	} else {
		m.Kind = string(p.Action)
		tag, err = finishLeaseSQL.Run(ctx, q, m, p.Tenant, p.TokenID, p.Generation, p.To, p.Status, p.Body)
	}
	if err != nil {
		return false, fmt.Errorf("consume: %s: %w", p.Action, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReportState is a leased token as a report that changed nothing reads it
// (reportStateSQL): its state and generation, its stored outcome, whether
// it was ever leased, and the report recorded for the generation asked
// about, if any.
type ReportState struct {
	State      token.State
	Generation int64
	Status     *int
	Body       []byte
	Leased     bool
	Reported   *token.Action
}

// ReadReportState reads tenant's token id as a report for generation finds
// it, or token.ErrNotFound; a names the report in other errors.
func ReadReportState(ctx context.Context, q db.DBTX, a token.Action, tenant, id string, generation int64) (ReportState, error) {
	var s ReportState
	err := q.QueryRow(ctx, reportStateSQL, tenant, id, generation).
		Scan(&s.State, &s.Generation, &s.Status, &s.Body, &s.Leased, &s.Reported)
	if err := db.RowError(err, token.ErrNotFound, "consume: "+string(a)); err != nil {
		return ReportState{}, err
	}
	return s, nil
}
