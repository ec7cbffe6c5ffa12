package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/metrics"
	"github.com/tokend/tokend/token"
)

const (
	idempotencyKeyHeader = "Idempotency-Key"
	replayedHeader       = "Idempotent-Replayed"
)

var errIdempotencyKeyMissing = &Problem{Status: http.StatusBadRequest, Code: "idempotency_key_missing", Title: "Idempotency-Key missing",
	Detail: "issuing a token needs an Idempotency-Key header naming the business intent; keep it when retrying"}

// timeFormat is RFC 3339 in UTC with the database's microseconds, always
// six digits, so that a time renders the same way on every replay.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func timestamp(t time.Time) string { return t.UTC().Format(timeFormat) }

func timestampOrNil(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := timestamp(*t)
	return &s
}

type issueRequest struct {
	Operation  string  `json:"operation"`
	Subject    string  `json:"subject"`
	TTLSeconds int     `json:"ttl_seconds"`
	Payload    payload `json:"payload"`
}

// issuedBody is the answer to an issue request. It is rendered from fields
// that never change after issuance, with the state as it was then, so a
// replay answers byte for byte what the first request got.
type issuedBody struct {
	ID            string      `json:"id"`
	Token         string      `json:"token"`
	Operation     string      `json:"operation"`
	Subject       string      `json:"subject"`
	State         token.State `json:"state"`
	ExpiresAt     string      `json:"expires_at"`
	PayloadDigest *string     `json:"payload_digest"`
}

func (s *Server) issue(c *gin.Context) {
	intentID := c.GetHeader(idempotencyKeyHeader)
	if intentID == "" {
		Abort(c, errIdempotencyKeyMissing)
		return
	}
	var req issueRequest
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	k := Caller(c)
	out, err := s.issuer.Issue(c.Request.Context(), s.pool, intent.Request{
		Tenant:     k.Tenant,
		Operation:  req.Operation,
		IntentID:   intentID,
		Subject:    req.Subject,
		TTLSeconds: req.TTLSeconds,
		Payload:    rawPayload(req.Payload),
		Actor:      k.ID,
	})
	switch {
	case err != nil:
		s.metrics.ObserveIssue(metrics.IssueRejected)
		s.noteRetiredKey(c, metrics.RetiredKeyIssue, err)
		Abort(c, err)
		return
	case out.Replayed:
		s.metrics.ObserveIssue(metrics.IssueReplayed)
	default:
		s.metrics.ObserveIssue(metrics.IssueCreated)
	}
	body := issuedBody{
		ID:        out.Token.ID,
		Token:     out.Secret.Reveal(),
		Operation: out.Token.Operation,
		Subject:   out.Token.Subject,
		State:     token.Issued,
		ExpiresAt: timestamp(out.Token.ExpiresAt),
	}
	if out.Token.PayloadDigest != nil {
		d := hex.EncodeToString(out.Token.PayloadDigest)
		body.PayloadDigest = &d
	}
	c.Header("Cache-Control", "no-store") // the body holds a bearer secret
	if out.Replayed {
		c.Header(replayedHeader, "true")
	}
	writeJSON(c, http.StatusCreated, body)
}

type consumeRequest struct {
	Token     string  `json:"token"`
	Operation string  `json:"operation"`
	Subject   string  `json:"subject"`
	Payload   payload `json:"payload"`
}

func (s *Server) consume(c *gin.Context) {
	var req consumeRequest
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	secret, err := token.ParseSecret(req.Token)
	if err != nil {
		Abort(c, err)
		return
	}
	k, ctx := Caller(c), c.Request.Context()
	// Only a verdict no token ever leaves (revoked, expired) is taken from
	// the cache; everything else is decided in Postgres.
	if err := s.cache.Rejected(ctx, k.Tenant, secret.Hash(), req.Operation, req.Subject); err != nil {
		s.metrics.ObserveSpend(metrics.SpendRejected)
		Abort(c, err)
		return
	}
	resp, err := s.spender.Spend(ctx, s.pool, consume.Request{
		Tenant:    k.Tenant,
		Secret:    secret,
		Operation: req.Operation,
		Subject:   req.Subject,
		Payload:   rawPayload(req.Payload),
		Actor:     k.ID,
	})
	s.metrics.ObserveSpend(spendOutcome(resp, err))
	s.forget(ctx, k.Tenant, resp)
	if err != nil {
		s.cache.RememberRejection(ctx, k.Tenant, secret.Hash(), req.Operation, req.Subject, err)
		s.noteRetiredKey(c, metrics.RetiredKeySpend, err)
		Abort(c, err)
		return
	}
	writeOutcome(c, resp)
}

type completeRequest struct {
	Generation *int64          `json:"generation"`
	Status     int             `json:"status"`
	Result     json.RawMessage `json:"result"`
}

type failRequest struct {
	Generation *int64          `json:"generation"`
	Status     int             `json:"status"`
	Error      json.RawMessage `json:"error"`
}

type unknownRequest struct {
	Generation *int64 `json:"generation"`
}

func (s *Server) complete(c *gin.Context) {
	var req completeRequest
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	s.finish(c, token.Complete, req.Generation, req.Status, req.Result)
}

func (s *Server) fail(c *gin.Context) {
	var req failRequest
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	s.finish(c, token.Fail, req.Generation, req.Status, req.Error)
}

func (s *Server) reportUnknown(c *gin.Context) {
	var req unknownRequest
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	s.finish(c, token.ReportUnknown, req.Generation, 0, nil)
}

// finish records a lease holder's report on the token named in the path.
func (s *Server) finish(c *gin.Context, a token.Action, generation *int64, status int, result json.RawMessage) {
	if generation == nil {
		Abort(c, invalidRequest(`field "generation" is required: the generation the lease was granted with`))
		return
	}
	id := c.Param("id")
	if !token.ValidID(id) {
		Abort(c, token.ErrNotFound)
		return
	}
	k := Caller(c)
	r := consume.Report{Tenant: k.Tenant, TokenID: id, Generation: *generation, Status: status, Actor: k.ID}
	if raw := rawPayload(result); raw != nil {
		r.Result = json.RawMessage(raw)
	}
	rec, err := consume.Finish(c.Request.Context(), s.pool, a, r)
	if err != nil {
		Abort(c, err)
		return
	}
	s.forget(c.Request.Context(), k.Tenant, consume.Response{TokenID: rec.TokenID, State: rec.State, Generation: rec.Generation, Replayed: rec.Replayed})
	// 200 with what was recorded, not the stored status: the holder must
	// tell "recorded" from "refused". Later spends get the stored outcome.
	if rec.Replayed {
		c.Header(replayedHeader, "true")
	}
	writeJSON(c, http.StatusOK, rec)
}

// writeOutcome answers with a spend's stored status and body, byte for byte.
func writeOutcome(c *gin.Context, resp consume.Response) {
	if resp.Replayed {
		c.Header(replayedHeader, "true")
	}
	c.Data(resp.Status, "application/json", resp.Body)
}

// tokenView is what a client may see of a token: no secret, no outcome.
type tokenView struct {
	ID             string      `json:"id"`
	Operation      string      `json:"operation"`
	Subject        string      `json:"subject"`
	State          token.State `json:"state"`
	Generation     int64       `json:"generation"`
	CreatedAt      string      `json:"created_at"`
	ExpiresAt      string      `json:"expires_at"`
	OperationID    *string     `json:"operation_id"`
	LeaseExpiresAt *string     `json:"lease_expires_at"`
	FinishedAt     *string     `json:"finished_at"`
}

func (s *Server) getToken(c *gin.Context) {
	r, err := s.lookupToken(c.Request.Context(), Caller(c).Tenant, c.Param("id"))
	if err != nil {
		Abort(c, err)
		return
	}
	v := tokenView{
		ID:             r.ID,
		Operation:      r.Operation,
		Subject:        r.Subject,
		State:          r.State,
		Generation:     r.Generation,
		CreatedAt:      timestamp(r.CreatedAt),
		ExpiresAt:      timestamp(r.ExpiresAt),
		LeaseExpiresAt: timestampOrNil(r.LeaseExpiresAt),
		FinishedAt:     timestampOrNil(r.FinishedAt),
	}
	if r.OperationID != "" {
		v.OperationID = &r.OperationID
	}
	writeJSON(c, http.StatusOK, v)
}

// writeJSON answers with v as JSON.
func writeJSON(c *gin.Context, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		Abort(c, err)
		return
	}
	c.Data(status, "application/json", body)
}
