package httpapi

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/event"
)

// MaxEventWait bounds the long poll of GET /v1/events.
const MaxEventWait = 30 * time.Second

// eventPollInterval is how often a long poll looks for new events.
const eventPollInterval = 200 * time.Millisecond

// feedQuery is what GET /v1/events reads.
type feedQuery struct {
	after int64
	limit int
	wait  time.Duration
}

var feedParams = []string{"after", "limit", "wait"}

func parseFeedQuery(q url.Values) (feedQuery, error) {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(feedParams, name):
			return feedQuery{}, invalidRequest(fmt.Sprintf("unknown query parameter %q", name))
		case len(q[name]) > 1:
			return feedQuery{}, invalidRequest(fmt.Sprintf("query parameter %q is given %d times", name, len(q[name])))
		}
	}
	f := feedQuery{limit: event.DefaultLimit}
	var err error
	if s := q.Get("after"); s != "" {
		if f.after, err = strconv.ParseInt(s, 10, 64); err != nil || f.after < 0 {
			return feedQuery{}, invalidRequest(fmt.Sprintf("after %q: want a cursor from a previous page's next_cursor", s))
		}
	}
	if s := q.Get("limit"); s != "" {
		if f.limit, err = strconv.Atoi(s); err != nil || f.limit < 1 || f.limit > event.MaxLimit {
			return feedQuery{}, invalidRequest(fmt.Sprintf("limit %q: want an integer from 1 to %d", s, event.MaxLimit))
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
// to wait seconds for one when there is none yet.
func (s *Server) listEvents(c *gin.Context) {
	f, err := parseFeedQuery(c.Request.URL.Query())
	if err != nil {
		Abort(c, err)
		return
	}
	ctx := c.Request.Context()
	tenant := Caller(c).Tenant
	deadline := time.Now().Add(f.wait)
	var events []event.Event
	for {
		if events, err = event.Read(ctx, s.pool, tenant, f.after, f.limit); err != nil {
			Abort(c, err)
			return
		}
		if len(events) > 0 || !time.Now().Add(eventPollInterval).Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			Abort(c, ctx.Err())
			return
		case <-time.After(eventPollInterval):
		}
	}
	// NextCursor is where the next read starts, also when this page is
	// empty, so a follower keeps it as is.
	page := client.EventPage{Items: make([]client.FeedEvent, 0, len(events)), NextCursor: strconv.FormatInt(f.after, 10)}
	for _, e := range events {
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
		page.Items = append(page.Items, v)
		page.NextCursor = strconv.FormatInt(e.Position, 10)
	}
	WriteJSON(c, http.StatusOK, page)
}
