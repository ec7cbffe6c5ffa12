package event

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
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
	// Epoch is the epoch of the page After came from (Page.Epoch); empty
	// skips the check. A feed restored from a backup older than the cursor
	// may hand out the cursor's position, and those after it, again to
	// other events: it then starts a new epoch, and refuses a cursor of an
	// earlier one past the position where it left that one, with a
	// *CursorEpochError, instead of reading on from it.
	Epoch string
}

// Page is one read of a tenant's feed.
type Page struct {
	Events []Event
	// Epoch is the feed's epoch: send it back with a cursor taken from
	// Events (Query.Epoch). Empty before the feed's first position.
	Epoch string
}

// MaxEpochLen bounds Query.Epoch; an epoch is made of letters, digits, _
// and -.
const MaxEpochLen = 64

// ErrCursorEpoch wraps a read after a cursor of an earlier epoch of the feed
// that is past the position where the feed left that epoch (after a restore
// from an older backup): the feed has handed those positions out again.
var ErrCursorEpoch = errors.New("event: cursor from an earlier epoch of the feed")

// CursorEpochError is ErrCursorEpoch with where to resume: read after
// Resume in Epoch (the feed's current epoch), deduplicating by event id
// what was already applied. Resume is 0 when the cursor's epoch is unknown
// to the feed.
type CursorEpochError struct {
	After       int64
	CursorEpoch string
	Epoch       string
	Resume      int64
}

func (e *CursorEpochError) Error() string {
	return fmt.Sprintf("%v: cursor %d of epoch %s; resume after %d in epoch %s",
		ErrCursorEpoch, e.After, e.CursorEpoch, e.Resume, e.Epoch)
}

// Unwrap makes errors.Is(err, ErrCursorEpoch) hold.
func (e *CursorEpochError) Unwrap() error { return ErrCursorEpoch }

// ErrCursorAhead wraps a read after a position the feed has never handed
// out: the cursor comes from another database (one restored from a backup
// older than the cursor, say). The feed will hand those positions out to
// other events, so reading on from the cursor would skip them.
var ErrCursorAhead = errors.New("event: cursor ahead of the feed")

// NotifyChannel is the channel on which a transaction that gives positions
// notifies, with the tenant as payload, at its commit: a process parking
// long polls LISTENs on it to wake the tenant's waiters.
const NotifyChannel = store.FeedChannel

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
	p, err := ReadPage(ctx, pool, tenant, q)
	return p.Events, err
}

// ReadPage is Read answering the feed's epoch with the events. A cursor of
// an earlier epoch (q.Epoch) past where the feed left it gets a
// *CursorEpochError.
func ReadPage(ctx context.Context, pool *pgxpool.Pool, tenant string, q Query) (Page, error) {
	if err := q.check(); err != nil {
		return Page{}, err
	}
	var epoch string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		_, epoch, err = positionTx(ctx, tx, tenant)
		return err
	}); err != nil {
		return Page{}, err
	}
	return read(ctx, pool, tenant, q, epoch)
}

// ReadTx is Read inside the caller's transaction. Positions it hands out,
// and the lock on the tenant's feed head, are the caller's until it commits.
func ReadTx(ctx context.Context, tx pgx.Tx, tenant string, q Query) ([]Event, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	_, epoch, err := positionTx(ctx, tx, tenant)
	if err != nil {
		return nil, err
	}
	p, err := read(ctx, tx, tenant, q, epoch)
	return p.Events, err
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
	n, _, err := positionTx(ctx, tx, tenant)
	return n, err
}

// positionTx is PositionTx answering also the feed's epoch after it.
func positionTx(ctx context.Context, tx pgx.Tx, tenant string) (n int64, epoch string, err error) {
	if err := token.CheckText("tenant", tenant); err != nil {
		return 0, "", fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	hz, err := store.ReadFeedHorizon(ctx, tx, tenant)
	if err != nil {
		return 0, "", fmt.Errorf("event: position: %w", err)
	}
	if !hz.Pending && !hz.Ahead && !hz.Adopt {
		return 0, hz.Epoch, nil
	}
	n, epoch, err = positionLocked(ctx, tx, tenant, hz.Node)
	return n, epoch, err
}

// positionLocked locks tenant's feed head, recording node on it if it has
// none, then positions or rebases.
func positionLocked(ctx context.Context, tx pgx.Tx, tenant, node string) (int64, string, error) {
	head, err := store.LockFeedHead(ctx, tx, tenant, newEpoch(), node)
	if err != nil {
		return 0, "", fmt.Errorf("event: position: lock the feed head: %w", err)
	}
	// Again with the head locked: another transaction may have positioned
	// or rebased while this one waited, and the horizon a rebase or the
	// positioning goes by must come from a statement routed to the tenant
	// (store.ReadFeedHorizon).
	hz, err := store.ReadFeedHorizon(ctx, tx, tenant)
	if err != nil {
		return 0, "", fmt.Errorf("event: position: %w", err)
	}
	epoch := hz.Epoch
	var n int64
	switch {
	case hz.Ahead:
		// Restored, into another cluster or to an earlier point, or moved
		// to another node: see store's feedHorizonSQL.
		epoch = newEpoch()
		if n, err = store.RebaseFeed(ctx, tx, tenant, head.Pos, hz.Xmin, epoch, hz.Node); err != nil {
			return 0, "", fmt.Errorf("event: position: rebase the feed after a restore: %w", err)
		}
	case hz.Pending:
		// Zero: nothing settled past the cursor after all.
		if n, err = store.PositionFeed(ctx, tx, tenant, head, positionBatch, hz.Xmin); err != nil {
			return 0, "", fmt.Errorf("event: position: %w", err)
		}
	}
	if n > 0 {
		// Sent at commit, on its own: a statement without a table runs
		// where notifications are heard (on Citus, the coordinator).
		if err := store.NotifyFeed(ctx, tx, tenant); err != nil {
			return 0, "", fmt.Errorf("event: position: notify: %w", err)
		}
	}
	return n, epoch, nil
}

// newEpoch is a new random epoch id: 16 hex digits.
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Heads gives positions to the settled events of tenants that have some,
// and answers each tenant's head, the last position handed out (0 before
// the first). When none has events to position it costs one round trip:
// a statement per tenant, each routed to the node that stores the tenant
// (store.QueueFeedHorizon), sent together.
func Heads(ctx context.Context, pool *pgxpool.Pool, tenants []string) (map[string]int64, error) {
	for _, t := range tenants {
		if err := token.CheckText("tenant", t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	heads := make(map[string]int64, len(tenants))
	var pending []string
	if len(tenants) > 0 {
		b := &pgx.Batch{}
		for _, t := range tenants {
			store.QueueFeedHorizon(b, t, func(h store.FeedHorizon) {
				heads[t] = h.Pos
				if h.Pending || h.Ahead || h.Adopt {
					pending = append(pending, t)
				}
			})
		}
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("event: heads: %w", err)
		}
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
	case !validEpoch(q.Epoch):
		return fmt.Errorf("%w: epoch %q: want up to %d letters, digits, _ or -", ErrInvalidRequest, q.Epoch, MaxEpochLen)
	}
	return nil
}

// validEpoch tells whether s can be an epoch (or is empty).
func validEpoch(s string) bool {
	if len(s) > MaxEpochLen {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// feedHead is a tenant's feed head.
type feedHead store.FeedHeadRow

func readHead(ctx context.Context, q db.DBTX, tenant string) (feedHead, error) {
	h, err := store.ReadFeedHead(ctx, q, tenant)
	return feedHead(h), err
}

// left answers the position where the feed left epoch e: positions up to it
// are the same in e and in the feed's current epoch. ok is false when the
// feed never had epoch e.
func (h feedHead) left(e string) (pos int64, ok bool) {
	for i := len(h.PriorEpochs) - 1; i >= 0; i-- {
		if h.PriorEpochs[i] != e || i >= len(h.PriorBases) {
			continue
		}
		// Left at the start of the epoch that followed it; the lowest
		// start of those since, if the feed was rebased again.
		pos = h.Base
		for j := i + 1; j < len(h.PriorBases); j++ {
			pos = min(pos, h.PriorBases[j])
		}
		return pos, true
	}
	return 0, false
}

// read reads a page after checking r's cursor against the feed's epochs;
// epoch is the feed's epoch as positioning left it. The epoch's history is
// read only for a cursor of another epoch.
func read(ctx context.Context, q db.DBTX, tenant string, r Query, epoch string) (Page, error) {
	if r.Epoch != "" && r.Epoch != epoch && r.After > 0 {
		head, err := readHead(ctx, q, tenant)
		if err != nil {
			return Page{}, fmt.Errorf("event: read: %w", err)
		}
		if epoch = head.Epoch; r.Epoch != epoch {
			left, _ := head.left(r.Epoch)
			if r.After > left {
				return Page{}, &CursorEpochError{After: r.After, CursorEpoch: r.Epoch, Epoch: epoch, Resume: left}
			}
		}
	}
	events, err := readEvents(ctx, q, tenant, r)
	return Page{Events: events, Epoch: epoch}, err
}

func readEvents(ctx context.Context, q db.DBTX, tenant string, r Query) ([]Event, error) {
	limit := cmp.Or(r.Limit, DefaultLimit)
	maxBytes := cmp.Or(r.MaxBytes, MaxBytes)
	rows, err := store.ReadFeed(ctx, q, tenant, r.After, limit, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("event: read: %w", err)
	}
	events := make([]Event, len(rows))
	for i, e := range rows {
		events[i] = Event{Position: e.Position, ID: e.ID, TokenID: e.TokenID, Operation: e.Operation, Subject: e.Subject,
			Type: e.Kind, Actor: e.Actor, From: e.From, To: e.To, Generation: e.Generation,
			OutcomeStatus: e.OutcomeStatus, Outcome: e.Outcome, At: e.At}
	}
	if len(events) == 0 && r.After > 0 {
		head, err := readHead(ctx, q, tenant)
		if err != nil {
			return nil, fmt.Errorf("event: read: %w", err)
		}
		if r.After > head.Pos {
			return nil, &CursorAheadError{After: r.After, Head: head.Pos}
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
func Stalls(ctx context.Context, q db.DBTX) (Stall, error) {
	var s Stall
	var err error
	if s.OldestTransaction, err = store.OldestTransaction(ctx, q); err != nil {
		return s, fmt.Errorf("event: stalls: %w", err)
	}
	if s.Held, err = store.HeldFeeds(ctx, q); err != nil {
		return s, fmt.Errorf("event: stalls: %w", err)
	}
	return s, nil
}

// Check answers the error Read gives q before reading: ErrInvalidRequest
// for a value out of range.
func (q Query) Check() error { return q.check() }
