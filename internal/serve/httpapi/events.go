package httpapi

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/serve/feedwait"
)

// MaxEventWait bounds the long poll of GET /v1/events.
const MaxEventWait = 30 * time.Second

// feedRetryAfter is the Retry-After, in seconds, of a long poll refused
// because too many wait already.
const feedRetryAfter = 5

// feedWireOptions encode a page as every answer is encoded, except that
// <, > and & are written as they are: an outcome body is sent at its own
// size, not up to six times it.
var feedWireOptions = jsonv2.JoinOptions(wireOptions, jsontext.EscapeForHTML(false))

// feedQuery is what GET /v1/events reads.
type feedQuery struct {
	event.Query
	wait time.Duration
}

var feedParams = []string{"after", "epoch", "limit", "max_bytes", "wait"}

func parseFeedQuery(q url.Values) (feedQuery, error) {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(feedParams, name):
			return feedQuery{}, invalidRequest(fmt.Sprintf("unknown query parameter %q", name))
		case len(q[name]) > 1:
			return feedQuery{}, invalidRequest(fmt.Sprintf("query parameter %q is given %d times", name, len(q[name])))
		}
	}
	f := feedQuery{Query: event.Query{Limit: event.DefaultLimit, MaxBytes: event.MaxBytes}}
	var err error
	if s := q.Get("after"); s != "" {
		if f.After, err = strconv.ParseInt(s, 10, 64); err != nil || f.After < 0 {
			return feedQuery{}, invalidRequest(fmt.Sprintf("after %q: want a cursor from a previous page's next_cursor", s))
		}
	}
	if s := q.Get("epoch"); s != "" {
		if len(s) > event.MaxEpochLen || (event.Query{Epoch: s}).Check() != nil {
			return feedQuery{}, invalidRequest(fmt.Sprintf("epoch %.80q: want a previous page's epoch", s))
		}
		f.Epoch = s
	}
	if s := q.Get("limit"); s != "" {
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 1 || f.Limit > event.MaxLimit {
			return feedQuery{}, invalidRequest(fmt.Sprintf("limit %q: want an integer from 1 to %d", s, event.MaxLimit))
		}
	}
	if s := q.Get("max_bytes"); s != "" {
		if f.MaxBytes, err = strconv.Atoi(s); err != nil || f.MaxBytes < 1 || f.MaxBytes > event.MaxBytes {
			return feedQuery{}, invalidRequest(fmt.Sprintf("max_bytes %q: want an integer from 1 to %d", s, event.MaxBytes))
		}
	}
	if s := q.Get("wait"); s != "" {
		secs, err := strconv.Atoi(s)
		if err != nil || secs < 0 || time.Duration(secs)*time.Second > MaxEventWait {
			return feedQuery{}, invalidRequest(fmt.Sprintf("wait %q: want seconds from 0 to %d", s, int(MaxEventWait/time.Second)))
		}
		f.wait = time.Duration(secs) * time.Second
	}
	return f, nil
}

// listEvents answers the caller's tenant's events after a cursor, waiting up
// to wait seconds for one when there is none yet. A waiting request issues
// no statement until the process's feed hub (internal/serve/feedwait) says the
// tenant's feed moved.
func (s *Server) listEvents(c *gin.Context) {
	f, err := parseFeedQuery(c.Request.URL.Query())
	if err != nil {
		Abort(c, err)
		return
	}
	ctx := c.Request.Context()
	tenant := Caller(c).Tenant
	var w *feedwait.Waiter
	if f.wait > 0 {
		// Parked before the first read, so that a move between that read
		// and the wait is not missed.
		switch w, err = s.feed.Join(tenant); {
		case err == nil:
			defer w.Leave()
		case errors.Is(err, feedwait.ErrClosed):
			f.wait = 0 // shutting down: answer what there is now
		}
	}
	timer := time.NewTimer(f.wait)
	defer timer.Stop()
	var page event.Page
	for {
		var changed, done <-chan struct{}
		if w != nil {
			changed, done = w.Changed(), w.Done()
		}
		if page, err = event.ReadPage(ctx, s.pool, tenant, f.Query); err != nil {
			abortFeed(c, err)
			return
		}
		if len(page.Events) > 0 || f.wait == 0 {
			break
		}
		if w == nil {
			Abort(c, &Problem{Status: http.StatusTooManyRequests, Code: "too_many_waiters", RetryAfter: feedRetryAfter,
				Detail: "too many long polls of the event feed wait on this server; retry later, or read without wait"})
			return
		}
		select {
		case <-ctx.Done():
			Abort(c, ctx.Err())
			return
		case <-timer.C:
		case <-done:
			// Shutting down, or another tenant needed the slot: the
			// empty page keeps the cursor, so the client reads on from it.
		case <-changed:
			continue
		}
		break
	}
	body, err := encodePage(page.Events, f.After, f.MaxBytes, page.Epoch)
	if err != nil {
		Abort(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", body)
}

// abortFeed answers a failed read; a cursor the feed cannot honour gets a
// 409 naming the last position it handed out.
func abortFeed(c *gin.Context, err error) {
	var ahead *event.CursorAheadError
	var epoch *event.CursorEpochError
	if errors.As(err, &epoch) {
		Abort(c, &Problem{Status: http.StatusConflict, Code: "cursor_epoch",
			Detail: fmt.Sprintf("cursor %d of epoch %s is past position %d, where this feed left that epoch (it was restored from an older backup): "+
				"positions after %d were handed out again to other events; read again with after=%d&epoch=%s and deduplicate by event id",
				epoch.After, epoch.CursorEpoch, epoch.Resume, epoch.Resume, epoch.Resume, epoch.Epoch)})
		return
	}
	if errors.As(err, &ahead) {
		Abort(c, &Problem{Status: http.StatusConflict, Code: "cursor_ahead",
			Detail: fmt.Sprintf("cursor %d is past the last position this feed handed out (%d): it comes from another database, "+
				"say one restored from an older backup; read again from a cursor you kept at or before %d, or from 0, and deduplicate by event id",
				ahead.After, ahead.Head, ahead.Head)})
		return
	}
	Abort(c, err)
}

// encodePage writes events as an EventPage, taking them in order while the
// body stays within maxBytes, and the first one always. NextCursor is where
// the next read starts, also when the page is empty, so a follower keeps it
// as is; Epoch (a validated id, letters and digits) goes back with it.
func encodePage(events []event.Event, after int64, maxBytes int, epoch string) ([]byte, error) {
	const open, sep = `{"items":[`, ","
	cursor := strconv.FormatInt(after, 10)
	body := []byte(open)
	for i, e := range events {
		v := client.FeedEvent{
			ID: e.ID, Position: e.Position, Type: e.Type, TokenID: e.TokenID,
			Operation: e.Operation, Subject: e.Subject, Actor: e.Actor,
			To: client.State(e.To), Generation: e.Generation,
			OutcomeStatus: e.OutcomeStatus, Outcome: e.Outcome, At: e.At,
		}
		if e.From != nil {
			from := client.State(*e.From)
			v.From = &from
		}
		item, err := jsonv2.Marshal(v, feedWireOptions)
		if err != nil {
			return nil, err
		}
		next := strconv.FormatInt(e.Position, 10)
		size := len(body) + len(item) + len(closing(next, epoch))
		if i > 0 {
			size += len(sep)
			if size > maxBytes {
				break
			}
			body = append(body, sep...)
		}
		body = append(body, item...)
		cursor = next
	}
	return append(body, closing(cursor, epoch)...), nil
}

// closing ends a page whose next cursor is cursor, in epoch.
func closing(cursor, epoch string) string {
	return `],"next_cursor":"` + cursor + `","epoch":"` + epoch + `"}`
}
