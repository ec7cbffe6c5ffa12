package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// ScanRecord reads a row of Columns into a Record.
func ScanRecord(row pgx.Row) (token.Record, error) { return scanRecord(row) }

// scanRecord reads a row of Columns into a Record, and the columns after
// them into extra.
func scanRecord(row pgx.Row, extra ...any) (token.Record, error) {
	var (
		r           token.Record
		operationID *string
		status      *int
	)
	err := row.Scan(append([]any{&r.Tenant, &r.ID, &r.Operation, &r.IntentID, &r.Subject, &r.State, &r.Generation,
		&operationID, &r.PayloadDigest, &r.CreatedAt, &r.ExpiresAt, &r.RetainUntil,
		&r.LeaseExpiresAt, &r.FinishedAt, &status, &r.ResultBody}, extra...)...)
	if operationID != nil {
		r.OperationID = *operationID
	}
	if status != nil {
		r.ResultStatus = *status
	}
	return r, err
}

// GetToken reads tenant's token id (getSQL), or token.ErrNotFound. A
// token that reads expired while stored issued has its expiry recorded
// first (expireAndReread), and is read again.
func GetToken(ctx context.Context, q db.DBTX, tenant, id string) (token.Record, error) {
	r, expiring, err := scanRead(q.QueryRow(ctx, getSQL, tenant, id))
	if err := db.RowError(err, token.ErrNotFound, "inspect: get"); err != nil {
		return token.Record{}, err
	}
	if !expiring {
		return r, nil
	}
	again, err := expireAndReread(ctx, q, tenant, []string{id})
	if err != nil {
		return token.Record{}, err
	}
	if r, ok := again[id]; ok {
		return r, nil
	}
	return token.Record{}, token.ErrNotFound
}

// scanRead reads a row of Columns and then expiringExpr.
func scanRead(row pgx.Row) (token.Record, bool, error) {
	var expiring bool
	r, err := scanRecord(row, &expiring)
	return r, expiring, err
}

// ReadLockWait bounds how long a read waits for the writer holding a token
// it found past its expiry (expireReadBoundedSQL) when it runs outside a
// transaction of the caller's; token.ErrInProgress when it runs out.
const ReadLockWait = 5 * time.Second

// readActor is the actor of the expire events reads record.
const readActor = "read"

// expireAndReread records the expiry of tenant's tokens ids that a read
// found issued past it (expireReadSQL), then reads them again: each as the
// expiry left it, or as the writer the expiry waited for left it. A token
// gone by then (purged) is missing from the answer.
func expireAndReread(ctx context.Context, q db.DBTX, tenant string, ids []string) (map[string]token.Record, error) {
	var err error
	if _, inTx := q.(pgx.Tx); inTx {
		_, err = q.Exec(ctx, expireReadSQL, tenant, ids, readActor)
	} else {
		_, err = q.Exec(ctx, expireReadBoundedSQL, tenant, ids, readActor, strconv.FormatInt(ReadLockWait.Milliseconds(), 10))
	}
	if LockNotAvailable(err) {
		return nil, fmt.Errorf("inspect: a change of the token is in progress: %w", token.ErrInProgress)
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: record expiry: %w", err)
	}
	rows, err := q.Query(ctx, rereadSQL, tenant, ids)
	if err != nil {
		return nil, fmt.Errorf("inspect: read again: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (token.Record, error) { return ScanRecord(r) })
	if err != nil {
		return nil, fmt.Errorf("inspect: read again: %w", err)
	}
	byID := make(map[string]token.Record, len(recs))
	for _, r := range recs {
		byID[r.ID] = r
	}
	return byID, nil
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
	Limit                       int     // the page's size
}

// ListTokens reads a page of tenant's tokens, newest first (listSQL), and
// the id the next page's tokens are below ("" on the last page). Tokens
// that read expired while stored issued have their expiry recorded first
// and are read again (expireAndReread); one that a writer moved meanwhile
// to a state the filter excludes, or that is gone, leaves the page, which
// may then hold fewer than Limit tokens and still have a next one.
func ListTokens(ctx context.Context, q db.DBTX, p ListParams) (items []token.Record, next string, err error) {
	var state *string
	if p.State != "" {
		s := string(p.State)
		state = &s
	}
	// One row more than the page tells whether there is a next page without
	// handing out a cursor to an empty one.
	rows, err := q.Query(ctx, listSQL[p.State], p.Tenant, state, p.Operation, p.Subject,
		p.CreatedAfter, p.CreatedBefore, p.Before, p.Limit+1, p.Search)
	if err != nil {
		return nil, "", fmt.Errorf("inspect: list: %w", err)
	}
	var expiring []string
	items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (token.Record, error) {
		rec, exp, err := scanRead(r)
		if exp {
			expiring = append(expiring, rec.ID)
		}
		return rec, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("inspect: list: %w", err)
	}
	if len(items) > p.Limit {
		items = items[:p.Limit]
		next = items[p.Limit-1].ID
	}
	if len(expiring) == 0 {
		return items, next, nil
	}
	again, err := expireAndReread(ctx, q, p.Tenant, expiring)
	if err != nil {
		return nil, "", err
	}
	kept := items[:0]
	for _, r := range items {
		if a, ok := again[r.ID]; ok {
			r = a
		} else if slices.Contains(expiring, r.ID) {
			continue
		}
		if p.State == "" || r.State == p.State {
			kept = append(kept, r)
		}
	}
	return kept, next, nil
}
