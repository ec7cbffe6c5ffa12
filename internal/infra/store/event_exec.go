package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// FeedHorizon is what feedHorizonSQL answers of a tenant's feed: the
// horizon (Xmin, Xmax), the head's position and epoch, the identity of the
// node the tenant is on (Node, feedNodeSQL), whether the head has no node
// recorded yet (Adopt), whether settled events wait past the head's cursor
// (Pending) and whether the feed must be rebased (Ahead).
type FeedHorizon struct {
	Xmin, Xmax     string
	Pos            int64
	Epoch          string
	Node           string
	Adopt          bool
	Pending, Ahead bool
}

func (h *FeedHorizon) scan(row pgx.Row) error {
	return row.Scan(&h.Xmin, &h.Xmax, &h.Pos, &h.Epoch, &h.Node, &h.Adopt, &h.Pending, &h.Ahead)
}

// ReadFeedHorizon reads tenant's feed horizon; it takes no lock and writes
// nothing.
func ReadFeedHorizon(ctx context.Context, q db.DBTX, tenant string) (FeedHorizon, error) {
	var h FeedHorizon
	return h, h.scan(q.QueryRow(ctx, feedHorizonSQL, tenant))
}

// QueueFeedHorizon queues tenant's horizon read on b; got sees it when the
// batch runs.
func QueueFeedHorizon(b *pgx.Batch, tenant string, got func(FeedHorizon)) {
	b.Queue(feedHorizonSQL, tenant).QueryRow(func(row pgx.Row) error {
		var h FeedHorizon
		if err := h.scan(row); err != nil {
			return err
		}
		got(h)
		return nil
	})
}

// FeedCursor is a locked feed head: the last position handed out and the
// cursor (Xid, Seq) after which events still wait for one.
type FeedCursor struct {
	Pos int64
	Xid string
	Seq int64
}

// LockFeedHead locks tenant's feed head in tx, creating it on first use in
// epoch on node, and recording node on a head that has none.
func LockFeedHead(ctx context.Context, tx pgx.Tx, tenant, epoch, node string) (FeedCursor, error) {
	var c FeedCursor
	err := tx.QueryRow(ctx, feedLockHeadSQL, tenant, epoch, node).Scan(&c.Pos, &c.Xid, &c.Seq)
	return c, err
}

// RebaseFeed rebases tenant's feed, its head locked at position head, onto
// horizon xmin, starting epoch on node; it answers how many events it
// positioned.
func RebaseFeed(ctx context.Context, tx pgx.Tx, tenant string, head int64, xmin, epoch, node string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, feedRebaseSQL, tenant, head, xmin, epoch, node).Scan(&n)
	return n, err
}

// PositionFeed numbers up to limit settled events after the locked head c
// whose transactions ended before horizon xmin, and answers how many (0
// when none had).
func PositionFeed(ctx context.Context, tx pgx.Tx, tenant string, c FeedCursor, limit int, xmin string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, feedPositionSQL, tenant, c.Pos, c.Xid, c.Seq, limit, xmin).Scan(&n)
	if db.NoRow(err) {
		return 0, nil
	}
	return n, err
}

// NotifyFeed tells FeedChannel's listeners, at tx's commit, that tenant's
// feed moved.
func NotifyFeed(ctx context.Context, q db.DBTX, tenant string) error {
	_, err := q.Exec(ctx, feedNotifySQL, tenant)
	return err
}

// FeedEvent is one event of a feed page.
type FeedEvent struct {
	Position                                     int64
	ID, TokenID, Operation, Subject, Kind, Actor string
	From                                         *token.State
	To                                           token.State
	Generation                                   int64
	OutcomeStatus                                *int
	Outcome                                      []byte
	At                                           time.Time
}

// ReadFeed reads up to limit of tenant's events after position after, cut
// to the byte budget maxBytes (the first one always taken).
func ReadFeed(ctx context.Context, q db.DBTX, tenant string, after int64, limit, maxBytes int) ([]FeedEvent, error) {
	rows, err := q.Query(ctx, feedReadSQL, tenant, after, limit, maxBytes)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (FeedEvent, error) {
		var e FeedEvent
		var from *string
		var to string
		err := row.Scan(&e.Position, &e.ID, &e.TokenID, &e.Operation, &e.Subject, &e.Kind, &e.Actor,
			&from, &to, &e.Generation, &e.OutcomeStatus, &e.Outcome, &e.At)
		if from != nil {
			s := token.State(*from)
			e.From = &s
		}
		e.To = token.State(to)
		return e, err
	})
}

// FeedHeadRow is a tenant's feed head: the last position handed out (0
// before the first), the epoch and the position it started at, and the
// epochs before it with theirs, oldest first.
type FeedHeadRow struct {
	Pos, Base   int64
	Epoch       string
	PriorEpochs []string
	PriorBases  []int64
}

// ReadFeedHead reads tenant's feed head.
func ReadFeedHead(ctx context.Context, q db.DBTX, tenant string) (FeedHeadRow, error) {
	var h FeedHeadRow
	err := q.QueryRow(ctx, feedHeadSQL, tenant).Scan(&h.Pos, &h.Epoch, &h.Base, &h.PriorEpochs, &h.PriorBases)
	return h, err
}

// OldestTransaction answers how long the oldest transaction holding every
// feed back has been open (zero when none).
func OldestTransaction(ctx context.Context, q db.DBTX) (time.Duration, error) {
	var secs float64
	err := q.QueryRow(ctx, feedStallSQL).Scan(&secs)
	return seconds(secs), err
}

// HeldFeeds answers, per tenant with an event held back by an open older
// transaction, how long the oldest one has waited.
func HeldFeeds(ctx context.Context, q db.DBTX) (map[string]time.Duration, error) {
	rows, err := q.Query(ctx, feedHeldSQL)
	if err != nil {
		return nil, err
	}
	held := map[string]time.Duration{}
	var tenant string
	var secs float64
	if _, err := pgx.ForEachRow(rows, []any{&tenant, &secs}, func() error {
		held[tenant] = seconds(secs)
		return nil
	}); err != nil {
		return nil, err
	}
	return held, nil
}

func seconds(s float64) time.Duration { return time.Duration(max(s, 0) * float64(time.Second)) }
