package event

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// Event is one state change of a token, as the feed tells it.
type Event struct {
	// Position is the event's place in its tenant's feed, from 1. Read
	// after it to get the events that follow.
	Position int64
	// ID identifies the event for good: deduplicate deliveries by it.
	ID        string
	TokenID   string
	Operation string
	Subject   string
	// Type is what happened: "issued", one of the token.Action values
	// (spend, spend_fail, lease, takeover, complete, fail, report_unknown,
	// lease_lapse, reconcile_succeeded, reconcile_not_executed,
	// reconcile_failed, revoke, expire), or "purged".
	Type string
	// Actor is who caused it: an API key id, "sweeper", an operator.
	Actor string
	// From is the state before, nil for the issue.
	From *token.State
	// To is the state after; "purged" when the token was deleted.
	To         token.State
	Generation int64
	// OutcomeStatus is the status of the outcome stored by this change,
	// nil when it stored none.
	OutcomeStatus *int
	// Outcome is the stored outcome body, for operations declared with
	// EventOutcome; nil otherwise.
	Outcome json.RawMessage
	At      time.Time
}

// DefaultLimit and MaxLimit bound a page of the feed.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// positionBatch is the most events one Position call numbers.
const positionBatch = 1000

// ErrInvalidRequest wraps a read the feed refuses: a negative cursor or a
// limit out of range.
var ErrInvalidRequest = errors.New("event: invalid request")

// Read answers up to limit events of tenant after position after (0: from
// the start), oldest first, having first given positions to the events that
// settled since the last read. A limit of zero means DefaultLimit.
func Read(ctx context.Context, pool *pgxpool.Pool, tenant string, after int64, limit int) ([]Event, error) {
	if err := check(after, limit); err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := PositionTx(ctx, tx, tenant)
		return err
	}); err != nil {
		return nil, err
	}
	return read(ctx, pool, tenant, after, limit)
}

// ReadTx is Read inside the caller's transaction. Positions it hands out,
// and the lock on the tenant's feed head, are the caller's until it commits.
func ReadTx(ctx context.Context, tx pgx.Tx, tenant string, after int64, limit int) ([]Event, error) {
	if err := check(after, limit); err != nil {
		return nil, err
	}
	if _, err := PositionTx(ctx, tx, tenant); err != nil {
		return nil, err
	}
	return read(ctx, tx, tenant, after, limit)
}

// Position gives feed positions to tenant's settled events and answers how
// many it numbered. Read calls it; a dispatcher may call it on its own.
func Position(ctx context.Context, pool *pgxpool.Pool, tenant string) (n int64, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		n, err = PositionTx(ctx, tx, tenant)
		return err
	})
	return n, err
}

// PositionTx is Position inside the caller's transaction.
func PositionTx(ctx context.Context, tx pgx.Tx, tenant string) (int64, error) {
	if err := token.CheckText("tenant", tenant); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	var pending bool
	if err := tx.QueryRow(ctx, pendingSQL, tenant).Scan(&pending); err != nil {
		return 0, fmt.Errorf("event: position: %w", err)
	}
	if !pending {
		return 0, nil
	}
	var head, seq int64
	var xid string
	if err := tx.QueryRow(ctx, lockHeadSQL, tenant).Scan(&head, &xid, &seq); err != nil {
		return 0, fmt.Errorf("event: position: lock the feed head: %w", err)
	}
	// No row: another transaction positioned them while this one waited.
	var n int64
	err := tx.QueryRow(ctx, positionSQL, tenant, head, xid, seq, positionBatch).Scan(&n)
	if err != nil && !db.NoRow(err) {
		return 0, fmt.Errorf("event: position: %w", err)
	}
	return n, nil
}

func check(after int64, limit int) error {
	switch {
	case after < 0:
		return fmt.Errorf("%w: cursor %d is negative", ErrInvalidRequest, after)
	case limit < 0 || limit > MaxLimit:
		return fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalidRequest, limit, MaxLimit)
	}
	return nil
}

func read(ctx context.Context, q db.DBTX, tenant string, after int64, limit int) ([]Event, error) {
	if limit == 0 {
		limit = DefaultLimit
	}
	rows, err := q.Query(ctx, readSQL, tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("event: read: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) {
		var e Event
		var from *string
		var to string
		err := row.Scan(&e.Position, &e.ID, &e.TokenID, &e.Operation, &e.Subject, &e.Type, &e.Actor,
			&from, &to, &e.Generation, &e.OutcomeStatus, &e.Outcome, &e.At)
		if from != nil {
			s := token.State(*from)
			e.From = &s
		}
		e.To = token.State(to)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("event: read: %w", err)
	}
	return events, nil
}
