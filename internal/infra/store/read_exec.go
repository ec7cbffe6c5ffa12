package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// ScanRecord reads a row of Columns into a Record.
func ScanRecord(row pgx.Row) (token.Record, error) {
	var (
		r           token.Record
		operationID *string
		status      *int
	)
	err := row.Scan(&r.Tenant, &r.ID, &r.Operation, &r.IntentID, &r.Subject, &r.State, &r.Generation,
		&operationID, &r.PayloadDigest, &r.CreatedAt, &r.ExpiresAt, &r.RetainUntil,
		&r.LeaseExpiresAt, &r.FinishedAt, &status, &r.ResultBody)
	if operationID != nil {
		r.OperationID = *operationID
	}
	if status != nil {
		r.ResultStatus = *status
	}
	return r, err
}

// GetToken reads tenant's token id (getSQL), or token.ErrNotFound.
func GetToken(ctx context.Context, q db.DBTX, tenant, id string) (token.Record, error) {
	r, err := ScanRecord(q.QueryRow(ctx, getSQL, tenant, id))
	if err := db.RowError(err, token.ErrNotFound, "inspect: get"); err != nil {
		return token.Record{}, err
	}
	return r, nil
}

// EventRow is one row of a token's audit trail (eventsSQL); From is empty
// for the issue event.
type EventRow struct {
	Seq        int64
	At         time.Time
	Actor      string
	Kind       string
	From       token.State
	To         token.State
	Generation int64
	Detail     json.RawMessage
}

// TokenEvents reads the audit trail of tenant's token id, oldest first
// (eventsSQL): none for a token that does not exist.
func TokenEvents(ctx context.Context, q db.DBTX, tenant, id string) ([]EventRow, error) {
	rows, err := q.Query(ctx, eventsSQL, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("inspect: events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventRow, error) {
		var (
			e    EventRow
			from *string
		)
		err := r.Scan(&e.Seq, &e.At, &e.Actor, &e.Kind, &from, &e.To, &e.Generation, &e.Detail)
		if from != nil {
			e.From = token.State(*from)
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("inspect: events: %w", err)
	}
	return events, nil
}

// ListParams are a page of listSQL: State picks the statement, a nil
// filter is none.
type ListParams struct {
	Tenant                      string
	State                       token.State
	Operation, Subject, Search  *string
	CreatedAfter, CreatedBefore *time.Time
	Before                      *string // the page's tokens have smaller ids
	Limit                       int
}

// ListTokens reads a page of tenant's tokens, newest first (listSQL).
func ListTokens(ctx context.Context, q db.DBTX, p ListParams) ([]token.Record, error) {
	var state *string
	if p.State != "" {
		s := string(p.State)
		state = &s
	}
	rows, err := q.Query(ctx, listSQL[p.State], p.Tenant, state, p.Operation, p.Subject,
		p.CreatedAfter, p.CreatedBefore, p.Before, p.Limit, p.Search)
	if err != nil {
		return nil, fmt.Errorf("inspect: list: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (token.Record, error) { return ScanRecord(r) })
	if err != nil {
		return nil, fmt.Errorf("inspect: list: %w", err)
	}
	return items, nil
}
