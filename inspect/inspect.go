// Package inspect reads tokens without changing them: one token, its audit
// trail, or a filtered page of a tenant's tokens. Nothing here can return a
// token's secret: it is not stored.
//
// States are reported as of the database's clock (StateExpr): an issued
// token whose expiry has passed reads as expired, as every spend refuses it,
// before the sweeper records it and after.
package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// Get returns tenant's token id, or token.ErrNotFound when the tenant has no
// such token (another tenant's token included).
func Get(ctx context.Context, q db.DBTX, tenant, id string) (token.Record, error) {
	if !token.ValidID(id) {
		return token.Record{}, token.ErrNotFound
	}
	r, err := Scan(q.QueryRow(ctx, getSQL, tenant, id))
	if err := db.RowError(err, token.ErrNotFound, "inspect: get"); err != nil {
		return token.Record{}, err
	}
	return r, nil
}

// Event is one entry of a token's audit trail.
type Event struct {
	Seq        int64           `json:"seq"` // increasing in the order events happened
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"` // an API key id, or the process that acted
	Kind       string          `json:"kind"`  // a token.Action, or "issued"
	From       token.State     `json:"from_state,omitempty"`
	To         token.State     `json:"to_state"`
	Generation int64           `json:"generation"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// Events returns the audit trail of tenant's token id, oldest first, or
// token.ErrNotFound.
func Events(ctx context.Context, q db.DBTX, tenant, id string) ([]Event, error) {
	if !token.ValidID(id) {
		return nil, token.ErrNotFound
	}
	rows, err := q.Query(ctx, eventsSQL, tenant, id)
	if err != nil {
		return nil, fmt.Errorf("inspect: events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var (
			e    Event
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
	if len(events) == 0 {
		// Every token has its issue event, so no events means no token;
		// asking tells a missing token from a query that raced a purge.
		if _, err := Get(ctx, q, tenant, id); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// Scan reads a row of Columns into a Record.
func Scan(row pgx.Row) (token.Record, error) {
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
