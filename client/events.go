package client

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// FeedEvent is one state change of a token, as the event feed tells it.
type FeedEvent struct {
	// ID identifies the event for good: deduplicate deliveries by it.
	ID string `json:"id"`
	// Position is the event's place in the tenant's feed.
	Position  int64  `json:"position"`
	Type      string `json:"type"` // issued, spend, lease, complete, revoke, expire, purged, …
	TokenID   string `json:"token_id"`
	Operation string `json:"operation"`
	Subject   string `json:"subject"`
	Actor     string `json:"actor"`
	From      *State `json:"from_state"` // nil for the issue
	// To is the state after the change; "purged" when the token was deleted.
	To            State `json:"to_state"`
	Generation    int64 `json:"generation"`
	OutcomeStatus *int  `json:"outcome_status"` // the status of the outcome this change stored
	// Outcome is the stored outcome body, when the operation was declared
	// with Policy.EventOutcome; null otherwise.
	Outcome json.RawMessage `json:"outcome"`
	At      time.Time       `json:"at"`
}

// EventPage is one read of the event feed.
type EventPage struct {
	Meta  `json:"-"`
	Items []FeedEvent `json:"items"`
	// NextCursor is where the next read starts; the same cursor when the
	// page is empty.
	NextCursor string `json:"next_cursor"`
	// Epoch is the feed's epoch: send it back with NextCursor
	// (EventsRequest.Epoch). It changes when the feed is restored from a
	// backup; empty before the feed's first event.
	Epoch string `json:"epoch,omitempty"`
}

// EventsRequest is one read of the feed.
type EventsRequest struct {
	// After is a previous page's NextCursor; empty starts from the first
	// event kept.
	After string
	// Epoch is the Epoch of the page After came from; empty skips the
	// check. A cursor of an earlier epoch past the point where a restored
	// feed left it gets ErrCursorEpoch, whose detail says where to resume,
	// instead of events at positions handed out again.
	Epoch string
	// Limit is the page size; zero is the server's default (100).
	Limit int
	// MaxBytes bounds the answer's body, from 1 to 1 MiB; zero is the
	// server's default, 1 MiB. A page always carries the next event, however
	// large, so a reader never stops behind one.
	MaxBytes int
	// Wait, when set, lets the server wait that long (at most 30 s) for an
	// event when there is none yet, in whole seconds.
	Wait time.Duration
}

// Events reads one page of the tenant's token lifecycle events: each event
// once, in feed order, none skipped, whatever order the changes committed in.
func (c *Client) Events(ctx context.Context, r EventsRequest) (*EventPage, error) {
	q := url.Values{}
	if r.After != "" {
		q.Set("after", r.After)
	}
	if r.Epoch != "" {
		q.Set("epoch", r.Epoch)
	}
	if r.Limit > 0 {
		q.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.MaxBytes > 0 {
		q.Set("max_bytes", strconv.Itoa(r.MaxBytes))
	}
	if r.Wait > 0 {
		q.Set("wait", strconv.Itoa(int(r.Wait/time.Second)))
	}
	var out EventPage
	m, err := c.send(ctx, http.MethodGet, "/v1/events", q, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// followWait is how long each read of Follow lets the server wait.
const followWait = 20 * time.Second

// Follow iterates over the tenant's events after the cursor after, waiting
// for new ones, until ctx ends or a read fails (it yields the error and
// stops). A 429 too_many_waiters is waited out, not yielded. Pages come within the server's byte bound (1 MiB, or one event),
// well under what the client reads of an answer (32 MiB), so Follow gets
// past large events. Keep the Position of the last event handled, as a cursor
// (strconv.FormatInt), to resume where it left off; FollowEpoch also keeps
// the feed's epoch.
func (c *Client) Follow(ctx context.Context, after string) iter.Seq2[FeedEvent, error] {
	return c.FollowEpoch(ctx, after, "", nil)
}

// FollowEpoch is Follow from a cursor of epoch (empty when unknown): each
// read sends the epoch of the page before, and epochOf, when not nil, is
// told the epoch of each page before its events are yielded, to keep beside
// the cursor. A cursor the feed no longer honours, its epoch left behind by
// a restore from an older backup, is yielded as ErrCursorEpoch (a *Problem
// whose detail says where to resume) and ends the iteration.
func (c *Client) FollowEpoch(ctx context.Context, after, epoch string, epochOf func(string)) iter.Seq2[FeedEvent, error] {
	return func(yield func(FeedEvent, error) bool) {
		for {
			p, err := c.Events(ctx, EventsRequest{After: after, Epoch: epoch, Wait: followWait})
			var tooMany *Problem
			if errors.Is(err, ErrTooManyWaiters) && errors.As(err, &tooMany) {
				// Nothing new yet and the server is full of waiters: read
				// again once it says to.
				t := time.NewTimer(time.Duration(max(tooMany.RetryAfter, 1)) * time.Second)
				select {
				case <-ctx.Done():
					t.Stop()
					yield(FeedEvent{}, ctx.Err())
					return
				case <-t.C:
				}
				continue
			}
			if err != nil {
				yield(FeedEvent{}, err)
				return
			}
			if p.Epoch != "" {
				epoch = p.Epoch
			}
			if epochOf != nil {
				epochOf(epoch)
			}
			for _, e := range p.Items {
				if !yield(e, nil) {
					return
				}
			}
			after = p.NextCursor
		}
	}
}
