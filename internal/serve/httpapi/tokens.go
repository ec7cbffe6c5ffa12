package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/internal/serve/reqbody"
	"github.com/tokend/tokend/token"
)

const (
	idempotencyKeyHeader = "Idempotency-Key"
	replayedHeader       = "Idempotent-Replayed"
	// tokenStateHeader is the issued token's state now. A replay's body must
	// be the first answer byte for byte, so its "state" stays "issued"
	// while the token may since have expired or been spent; the header says
	// what is true without changing the body.
	tokenStateHeader = "Token-State"
)

var errIdempotencyKeyMissing = &Problem{Status: http.StatusBadRequest, Code: "idempotency_key_missing", Title: "Idempotency-Key missing",
	Detail: "issuing a token needs an Idempotency-Key header naming the business intent; keep it when retrying"}

func (s *Server) issue(c *gin.Context) {
	intentID := c.GetHeader(idempotencyKeyHeader)
	if intentID == "" {
		Abort(c, errIdempotencyKeyMissing)
		return
	}
	var req reqbody.Issue
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
		Payload:    reqbody.Raw(req.Payload),
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
	// Rendered from fields that never change after issuance, with the state
	// as it was then, so a replay answers byte for byte what the first
	// request got.
	body := client.IssuedToken{
		ID:        out.Token.ID,
		Token:     out.Secret.Reveal(),
		Operation: out.Token.Operation,
		Subject:   out.Token.Subject,
		State:     client.Issued,
		ExpiresAt: out.Token.ExpiresAt,
	}
	if out.Token.PayloadDigest != nil {
		d := hex.EncodeToString(out.Token.PayloadDigest)
		body.PayloadDigest = &d
	}
	c.Header("Cache-Control", "no-store") // the body holds a bearer secret
	state := client.Issued
	if out.Replayed {
		c.Header(replayedHeader, "true")
		state = client.State(out.Token.State)
	}
	c.Header(tokenStateHeader, string(state))
	WriteJSON(c, http.StatusCreated, &body)
}

func (s *Server) consume(c *gin.Context) {
	var req reqbody.Consume
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
		Payload:   reqbody.Raw(req.Payload),
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

func (s *Server) complete(c *gin.Context) {
	var req reqbody.Complete
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	s.finish(c, token.Complete, req.Generation, req.Status, req.Result)
}

func (s *Server) fail(c *gin.Context) {
	var req reqbody.Fail
	if err := Decode(c, &req); err != nil {
		Abort(c, err)
		return
	}
	s.finish(c, token.Fail, req.Generation, req.Status, req.Error)
}

func (s *Server) reportUnknown(c *gin.Context) {
	var req reqbody.Unknown
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
	if raw := reqbody.Raw(result); raw != nil {
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
	WriteJSON(c, http.StatusOK, client.Recorded{TokenID: rec.TokenID, State: client.State(rec.State), Generation: rec.Generation, Status: rec.Status})
}

// writeOutcome answers with a spend's stored status and body, byte for byte.
func writeOutcome(c *gin.Context, resp consume.Response) {
	if resp.Replayed {
		c.Header(replayedHeader, "true")
	}
	c.Data(resp.Status, "application/json", resp.Body)
}

func (s *Server) getToken(c *gin.Context) {
	r, err := s.lookupToken(c.Request.Context(), Caller(c).Tenant, c.Param("id"))
	if err != nil {
		Abort(c, err)
		return
	}
	// What a client may see of a token: no secret, no outcome.
	v := client.Token{
		ID:             r.ID,
		Operation:      r.Operation,
		Subject:        r.Subject,
		State:          client.State(r.State),
		Generation:     r.Generation,
		CreatedAt:      r.CreatedAt,
		ExpiresAt:      r.ExpiresAt,
		LeaseExpiresAt: r.LeaseExpiresAt,
		FinishedAt:     r.FinishedAt,
	}
	if r.OperationID != "" {
		v.OperationID = &r.OperationID
	}
	WriteJSON(c, http.StatusOK, &v)
}
