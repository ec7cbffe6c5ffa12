package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/token"
)

// MaxEventWait bounds the long poll of GET /v1/events.
const MaxEventWait = 30 * time.Second

// eventPollInterval is how often a long poll looks for new events.
const eventPollInterval = 200 * time.Millisecond

// feedEventView is one event of GET /v1/events.
type feedEventView struct {
	ID            string          `json:"id"`
	Position      int64           `json:"position"`
	Type          string          `json:"type"`
	TokenID       string          `json:"token_id"`
	Operation     string          `json:"operation"`
	Subject       string          `json:"subject"`
	Actor         string          `json:"actor"`
	From          *token.State    `json:"from_state"`
	To            token.State     `json:"to_state"`
	Generation    int64           `json:"generation"`
	OutcomeStatus *int            `json:"outcome_status"`
	Outcome       json.RawMessage `json:"outcome"` // null unless the operation opted in
	At            string          `json:"at"`
}

// feedPage is the answer of GET /v1/events. NextCursor is where the next
// read starts, also when this page is empty, so a follower keeps it as is.
type feedPage struct {
	Items      []feedEventView `json:"items"`
	NextCursor string          `json:"next_cursor"`
}

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
	page := feedPage{Items: make([]feedEventView, 0, len(events)), NextCursor: strconv.FormatInt(f.after, 10)}
	for _, e := range events {
		page.Items = append(page.Items, feedEventView{
			ID: e.ID, Position: e.Position, Type: e.Type, TokenID: e.TokenID,
			Operation: e.Operation, Subject: e.Subject, Actor: e.Actor,
			From: e.From, To: e.To, Generation: e.Generation,
			OutcomeStatus: e.OutcomeStatus, Outcome: e.Outcome, At: timestamp(e.At),
		})
		page.NextCursor = strconv.FormatInt(e.Position, 10)
	}
	writeJSON(c, http.StatusOK, page)
}
