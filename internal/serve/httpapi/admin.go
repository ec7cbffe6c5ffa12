package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/serve/reqbody"
	"github.com/tokend/tokend/token"
)

// The operator's token routes. Each acts on the caller's tenant only: another
// tenant's token is answered exactly like a missing one, because the
// packages below look tokens up by (tenant, id). The audit actor of every
// change is the operator's API key id.

// purgeMaxBatches bounds the batches of each step of one purge request, so
// that a request over a large backlog ends within the server's write
// timeout; the caller repeats the request until it purges nothing.
const purgeMaxBatches = 10

// viewRecord is everything stored about a token, as operators see it. The
// secret is not among it: only its hash is stored, and that is not shown.
func viewRecord(r token.Record) client.Record {
	v := client.Record{
		ID:             r.ID,
		Tenant:         r.Tenant,
		Operation:      r.Operation,
		Subject:        r.Subject,
		IntentID:       r.IntentID,
		State:          client.State(r.State),
		Generation:     r.Generation,
		CreatedAt:      r.CreatedAt,
		ExpiresAt:      r.ExpiresAt,
		RetainUntil:    r.RetainUntil,
		LeaseExpiresAt: r.LeaseExpiresAt,
		FinishedAt:     r.FinishedAt,
		ResultBody:     r.ResultBody, // stored as the JSON a spend answered
	}
	if r.OperationID != "" {
		v.OperationID = &r.OperationID
	}
	if r.PayloadDigest != nil {
		d := hex.EncodeToString(r.PayloadDigest)
		v.PayloadDigest = &d
	}
	if r.ResultStatus != 0 {
		v.ResultStatus = &r.ResultStatus
	}
	return v
}

func (s *Server) inspectToken(c *gin.Context) {
	ctx, tenant, id := c.Request.Context(), Caller(c).Tenant, c.Param("id")
	var d client.TokenDetail
	// One snapshot for the record and its trail, so that they agree even
	// while the token moves.
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		r, err := inspect.Get(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		evs, err := inspect.Events(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		d = client.TokenDetail{Record: viewRecord(r), Events: make([]client.Event, 0, len(evs))}
		for _, e := range evs {
			v := client.Event{Seq: e.Seq, At: e.At, Actor: e.Actor, Kind: e.Kind, To: client.State(e.To), Generation: e.Generation, Detail: e.Detail}
			if e.From != "" {
				from := client.State(e.From)
				v.From = &from
			}
			d.Events = append(d.Events, v)
		}
		return nil
	})
	if err != nil {
		Abort(c, err)
		return
	}
	WriteJSON(c, http.StatusOK, d)
}

func (s *Server) listTokens(c *gin.Context) {
	f, err := parseFilter(c.Request.URL.Query())
	if err != nil {
		Abort(c, err)
		return
	}
	items, next, err := inspect.List(c.Request.Context(), s.pool, Caller(c).Tenant, f)
	if err != nil {
		Abort(c, err)
		return
	}
	page := client.Page{Items: make([]client.Record, 0, len(items))}
	for _, r := range items {
		page.Items = append(page.Items, viewRecord(r))
	}
	if next != "" {
		page.NextCursor = &next
	}
	WriteJSON(c, http.StatusOK, page)
}

// filterParams are the query parameters of GET /v1/admin/tokens.
var filterParams = []string{"state", "operation", "subject", "created_after", "created_before", "limit", "cursor"}

// parseFilter reads a token filter from query parameters. Like Decode, it
// refuses what it does not know: a misspelt filter would otherwise list
// every token.
func parseFilter(q url.Values) (inspect.Filter, error) {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(filterParams, name):
			return inspect.Filter{}, invalidRequest(fmt.Sprintf("unknown query parameter %q", name))
		case len(q[name]) > 1:
			return inspect.Filter{}, invalidRequest(fmt.Sprintf("query parameter %q is given %d times", name, len(q[name])))
		}
	}
	f := inspect.Filter{
		State:     token.State(q.Get("state")),
		Operation: q.Get("operation"),
		Subject:   q.Get("subject"),
		Cursor:    q.Get("cursor"),
	}
	var err error
	if f.CreatedAfter, err = queryTime(q, "created_after"); err != nil {
		return inspect.Filter{}, err
	}
	if f.CreatedBefore, err = queryTime(q, "created_before"); err != nil {
		return inspect.Filter{}, err
	}
	if s := q.Get("limit"); s != "" {
		// Zero would mean the default to inspect; in a query it is a mistake.
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 1 {
			return inspect.Filter{}, invalidRequest(fmt.Sprintf("limit %q: want an integer from 1 to %d", s, inspect.MaxLimit))
		}
	}
	return f, f.Validate()
}

// queryTime parses the RFC 3339 time of query parameter name, zero when absent.
func queryTime(q url.Values, name string) (time.Time, error) {
	s := q.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalidRequest(fmt.Sprintf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", name, s))
	}
	return t, nil
}

func (s *Server) revokeToken(c *gin.Context) {
	var req reqbody.Revoke
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	if req.Reason == "" {
		Abort(c, invalidRequest(`field "reason" is required: the audit trail records why the token was revoked`))
		return
	}
	k := Caller(c)
	r, err := admin.Revoke(c.Request.Context(), s.pool, k.Tenant, c.Param("id"), admin.Revocation{Reason: req.Reason, Actor: k.ID})
	if err != nil {
		Abort(c, err)
		return
	}
	s.forgetRecord(c.Request.Context(), r)
	WriteJSON(c, http.StatusOK, viewRecord(r))
}

func (s *Server) reconcileToken(c *gin.Context) {
	var req reqbody.Reconcile
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	k := Caller(c)
	rec := admin.Reconciliation{Outcome: admin.Outcome(req.Outcome), Status: req.Status, Actor: k.ID}
	// Only when present: a nil json.RawMessage in Result would be a result
	// of JSON null, which not_executed refuses.
	if raw := reqbody.Raw(req.Result); raw != nil {
		rec.Result = json.RawMessage(raw)
	}
	r, err := admin.Reconcile(c.Request.Context(), s.pool, k.Tenant, c.Param("id"), rec)
	if err != nil {
		Abort(c, err)
		return
	}
	s.forgetRecord(c.Request.Context(), r)
	WriteJSON(c, http.StatusOK, viewRecord(r))
}

func (s *Server) purge(c *gin.Context) {
	// A purge takes no parameters. A body, if sent, must be an empty object,
	// so that a parameter this server does not know is refused, not ignored.
	if c.Request.ContentLength != 0 {
		if err := Decode(c, &struct{}{}); err != nil {
			Abort(c, err)
			return
		}
	}
	k := Caller(c)
	n, err := admin.PurgeTenant(c.Request.Context(), s.pool, k.Tenant, admin.PurgeOptions{MaxBatches: purgeMaxBatches, Actor: k.ID})
	if err != nil {
		Abort(c, err)
		return
	}
	WriteJSON(c, http.StatusOK, client.Purged{Purged: n})
}

func (s *Server) stats(c *gin.Context) {
	st, err := admin.UnresolvedTenant(c.Request.Context(), s.pool, Caller(c).Tenant)
	if err != nil {
		Abort(c, err)
		return
	}
	WriteJSON(c, http.StatusOK, client.Stats{
		Pending:                 st.Pending,
		Unknown:                 st.Unknown,
		OldestPendingAgeSeconds: int64(st.OldestPendingAge / time.Second),
		OldestUnknownAgeSeconds: int64(st.OldestUnknownAge / time.Second),
	})
}
