package event

import (
	"cmp"
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

// DefaultLimit and MaxLimit bound a page of the feed in events;
// MaxBytes bounds it in bytes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
	// MaxBytes is the default and largest byte budget of a page: the sum of
	// its events' sizes (see Query.MaxBytes).
	MaxBytes = 1 << 20
)

// Query is one read of a tenant's feed.
type Query struct {
	// After is the position to read after; 0 reads from the start.
	After int64
	// Limit is the most events answered, 1 to MaxLimit; 0 is DefaultLimit.
	Limit int
	// MaxBytes is the page's byte budget, 1 to MaxBytes; 0 is MaxBytes.
	// Events are taken, oldest first, while the sum of their sizes stays
	// within it, and the first one always, however large: a reader always
	// gets past it. An event's size here is that of its stored fields (the
	// outcome body and the texts), a lower bound of its JSON, so a server
	// that encodes them may cut a page further to a budget of its own.
	MaxBytes int
}

// ErrCursorAhead wraps a read after a position the feed has never handed
// out: the cursor comes from another database (one restored from a backup
// older than the cursor, say). The feed will hand those positions out to
// other events, so reading on from the cursor would skip them.
var ErrCursorAhead = errors.New("event: cursor ahead of the feed")

// NotifyChannel is the channel on which a transaction that gives positions
// notifies, with the tenant as payload, at its commit: a process parking
// long polls LISTENs on it to wake the tenant's waiters.
const NotifyChannel = "tokend_event_feed"

// positionBatch is the most events one Position call numbers.
const positionBatch = 1000

// ErrInvalidRequest wraps a read the feed refuses: a negative cursor or a
// limit out of range.
var ErrInvalidRequest = errors.New("event: invalid request")

// Read answers the events of tenant after q.After, oldest first, within
// q's bounds, having first given positions to the events that settled since
// the last read. A cursor past the last position handed out gets
// ErrCursorAhead.
func Read(ctx context.Context, pool *pgxpool.Pool, tenant string, q Query) ([]Event, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := PositionTx(ctx, tx, tenant)
		return err
	}); err != nil {
		return nil, err
	}
	return read(ctx, pool, tenant, q)
}

// ReadTx is Read inside the caller's transaction. Positions it hands out,
// and the lock on the tenant's feed head, are the caller's until it commits.
func ReadTx(ctx context.Context, tx pgx.Tx, tenant string, q Query) ([]Event, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	if _, err := PositionTx(ctx, tx, tenant); err != nil {
		return nil, err
	}
	return read(ctx, tx, tenant, q)
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
	var ahead bool
	if err := tx.QueryRow(ctx, lockHeadSQL, tenant).Scan(&head, &xid, &seq, &ahead); err != nil {
		return 0, fmt.Errorf("event: position: lock the feed head: %w", err)
	}
	var n int64
	if ahead {
		// Restored into another cluster: see aheadSQL.
		if err := tx.QueryRow(ctx, rebaseSQL, tenant, head).Scan(&n); err != nil {
			return 0, fmt.Errorf("event: position: rebase the feed after a restore: %w", err)
		}
	} else {
		// No row: another transaction positioned them while this one waited.
		err := tx.QueryRow(ctx, positionSQL, tenant, head, xid, seq, positionBatch).Scan(&n)
		if err != nil && !db.NoRow(err) {
			return 0, fmt.Errorf("event: position: %w", err)
		}
	}
	if n > 0 {
		// Sent at commit, on its own: a statement without a table runs
		// where notifications are heard (on Citus, the coordinator).
		if _, err := tx.Exec(ctx, notifySQL, tenant); err != nil {
			return 0, fmt.Errorf("event: position: notify: %w", err)
		}
	}
	return n, nil
}

// Heads gives positions to the settled events of tenants that have some,
// and answers each tenant's head, the last position handed out (0 before
// the first). When none has events to position it costs one statement.
func Heads(ctx context.Context, pool *pgxpool.Pool, tenants []string) (map[string]int64, error) {
	for _, t := range tenants {
		if err := token.CheckText("tenant", t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	rows, err := pool.Query(ctx, headsSQL, tenants)
	if err != nil {
		return nil, fmt.Errorf("event: heads: %w", err)
	}
	heads := make(map[string]int64, len(tenants))
	var pending []string
	var t string
	var head int64
	var more bool
	if _, err := pgx.ForEachRow(rows, []any{&t, &head, &more}, func() error {
		heads[t] = head
		if more {
			pending = append(pending, t)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("event: heads: %w", err)
	}
	for _, t := range pending {
		n, err := Position(ctx, pool, t)
		if err != nil {
			return nil, err
		}
		heads[t] += n
	}
	return heads, nil
}

func (q Query) check() error {
	switch {
	case q.After < 0:
		return fmt.Errorf("%w: cursor %d is negative", ErrInvalidRequest, q.After)
	case q.Limit < 0 || q.Limit > MaxLimit:
		return fmt.Errorf("%w: limit %d: want 1 to %d", ErrInvalidRequest, q.Limit, MaxLimit)
	case q.MaxBytes < 0 || q.MaxBytes > MaxBytes:
		return fmt.Errorf("%w: max bytes %d: want 1 to %d", ErrInvalidRequest, q.MaxBytes, MaxBytes)
	}
	return nil
}

func read(ctx context.Context, q db.DBTX, tenant string, r Query) ([]Event, error) {
	limit := cmp.Or(r.Limit, DefaultLimit)
	maxBytes := cmp.Or(r.MaxBytes, MaxBytes)
	rows, err := q.Query(ctx, readSQL, tenant, r.After, limit, maxBytes)
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
	if len(events) == 0 && r.After > 0 {
		var head int64
		if err := q.QueryRow(ctx, headSQL, tenant).Scan(&head); err != nil {
			return nil, fmt.Errorf("event: read: %w", err)
		}
		if r.After > head {
			return nil, &CursorAheadError{After: r.After, Head: head}
		}
	}
	return events, nil
}

// CursorAheadError is ErrCursorAhead with the feed's head: the last position
// handed out. A reader resumes from a cursor it kept before the head, or from
// 0, deduplicating by event id what it already applied.
type CursorAheadError struct {
	After, Head int64
}

func (e *CursorAheadError) Error() string {
	return fmt.Sprintf("%v: cursor %d, last position %d", ErrCursorAhead, e.After, e.Head)
}

// Unwrap makes errors.Is(err, ErrCursorAhead) hold.
func (e *CursorAheadError) Unwrap() error { return ErrCursorAhead }

// Stall is what holds the feeds back.
type Stall struct {
	// OldestTransaction is how long the oldest transaction running on the
	// server (any database), or prepared, has been open: events written
	// after it started wait for it to end. Zero when none.
	OldestTransaction time.Duration
	// Held is, per tenant that has read its feed, how long its oldest
	// committed event has waited for a position because an older
	// transaction is still open. Tenants with none held back are absent.
	Held map[string]time.Duration
}

// Stalls answers what holds the feeds back now, in two statements.
func Stalls(ctx context.Context, pool *pgxpool.Pool) (Stall, error) {
	var s Stall
	var secs float64
	if err := pool.QueryRow(ctx, stallSQL).Scan(&secs); err != nil {
		return s, fmt.Errorf("event: stalls: %w", err)
	}
	s.OldestTransaction = seconds(secs)
	rows, err := pool.Query(ctx, heldSQL)
	if err != nil {
		return s, fmt.Errorf("event: stalls: %w", err)
	}
	s.Held = map[string]time.Duration{}
	var tenant string
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &secs}, func() error {
		s.Held[tenant] = seconds(secs)
		return nil
	}); err != nil {
		return s, fmt.Errorf("event: stalls: %w", err)
	}
	return s, nil
}

func seconds(s float64) time.Duration { return time.Duration(max(s, 0) * float64(time.Second)) }
