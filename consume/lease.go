package consume

import (
	"bytes"
	"cmp"
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// grantLease hands execution rights of a lease-mode token to this spender: a
// new generation, a lease end by the database clock, and the downstream
// operation id, which a takeover keeps so the downstream can deduplicate.
//
// With last not nil, the grant is queued there, to go with COMMIT in one
// round trip: the Response then has its Lease but no Body yet, and
// leaseGranted completes it once the batch has been read.
func (s *Spender) grantLease(ctx context.Context, tx pgx.Tx, req Request, t *locked, a token.Action, last *pgx.Batch) (Response, error) {
	to, err := token.Next(t.state, a)
	if err != nil {
		return Response{}, err
	}
	opID := deref(t.operationID)
	if opID == "" {
		opID = token.NewOperationID()
	}
	l := &Lease{}
	p := store.LeaseParams{Tenant: req.Tenant, TokenID: t.id, LeaseSeconds: t.policy.LeaseSeconds, OperationID: opID,
		Actor: req.Actor, Action: a, From: t.state}
	// Lease is store.Leased with JSON names: the grant scans into it.
	if err := store.Lease(ctx, tx, last, p, (*store.Leased)(l)); err != nil {
		return Response{}, err
	}
	resp := Response{TokenID: t.id, State: to, Status: http.StatusAccepted, Lease: l}
	if last != nil {
		return resp, nil
	}
	return leaseGranted(resp)
}

// leaseGranted completes the Response of a grant whose Lease has been read:
// its generation and stored body.
func leaseGranted(resp Response) (Response, error) {
	body, err := encodeStored(struct {
		TokenID string      `json:"token_id"`
		State   token.State `json:"state"`
		*Lease
	}{resp.TokenID, resp.State, resp.Lease})
	if err != nil {
		return Response{}, err
	}
	resp.Body, resp.Generation = body, resp.Lease.Generation
	return resp, nil
}

// Report is a lease holder's account of what happened downstream.
type Report struct {
	Tenant     string
	TokenID    string
	Generation int64 // the generation the holder was granted
	// Status is stored and replayed to later spends. Complete: a 2xx that
	// carries a body, default 200; Fail: a 4xx or 5xx, default 422 (see
	// token.CheckOutcomeStatus). ReportUnknown stores none.
	Status int
	Result any // Complete: the result; Fail: the error; stored and replayed
	Actor  string
}

// Recorded is what a lease holder's report recorded, the answer to it. It
// never carries the stored result or error: a token id is a public handle,
// and an outcome is only for whoever holds the secret or an operator key.
type Recorded struct {
	TokenID    string      `json:"token_id"`
	State      token.State `json:"state"` // the state the report moved the token to
	Generation int64       `json:"generation"`
	// Status is the status later spends replay; absent for ReportUnknown,
	// which stores no outcome.
	Status int `json:"status,omitempty"`
	// Replayed: this report had already been recorded, with the same content.
	Replayed bool `json:"-"`
}

// FinishTx records a lease holder's report inside tx: token.Complete,
// token.Fail or token.ReportUnknown. The generation check and the state change
// are one conditional UPDATE, so a holder whose lease was taken over gets
// token.ErrStaleGeneration and writes nothing.
//
// The same report again (same generation, action, status, and a result that
// is the same JSON value) gets the same Recorded, with Replayed set, however
// the token moved since; a different report for that generation gets
// ErrReportConflict. A token never leased, or a generation never granted,
// gets token.ErrInvalidState.
func FinishTx(ctx context.Context, tx pgx.Tx, a token.Action, r Report) (Recorded, error) {
	return finish(ctx, tx, a, r)
}

// finish is FinishTx on q, a transaction or, for Finish, the pool: the
// report is one statement, its own transaction in autocommit.
func finish(ctx context.Context, q store.Batcher, a token.Action, r Report) (Recorded, error) {
	to, err := token.Next(token.Pending, a)
	if err != nil {
		return Recorded{}, err
	}
	var body []byte
	status := r.Status
	switch a {
	case token.Complete:
		status = cmp.Or(status, http.StatusOK)
		body, err = OutcomeBody{TokenID: r.TokenID, State: to, Result: r.Result}.Encode()
	case token.Fail:
		status = cmp.Or(status, http.StatusUnprocessableEntity)
		body, err = OutcomeBody{TokenID: r.TokenID, State: to, Error: r.Result}.Encode()
	}
	if err != nil {
		return Recorded{}, tokend.InvalidWith(ErrInvalidPayload, "result", err)
	}
	if a != token.ReportUnknown {
		if err := token.CheckOutcomeStatus(to, status); err != nil {
			return Recorded{}, tokend.InvalidWith(ErrInvalidPayload, "", err)
		}
	}
	rec := Recorded{TokenID: r.TokenID, State: to, Generation: r.Generation, Status: status}

	recorded, err := store.Report(ctx, q, store.ReportParams{Tenant: r.Tenant, TokenID: r.TokenID, Generation: r.Generation,
		Action: a, To: to, Status: status, Body: body, Actor: r.Actor})
	if err != nil {
		return Recorded{}, err
	}
	if recorded {
		return rec, nil
	}
	return explainFinish(ctx, q, a, r, rec, body)
}

// explainFinish tells why a report changed nothing: the same report was
// already recorded (a replay), or an error. rec and body are what the report
// would have recorded and stored.
func explainFinish(ctx context.Context, q db.DBTX, a token.Action, r Report, rec Recorded, body []byte) (Recorded, error) {
	st, err := store.ReadReportState(ctx, q, a, r.Tenant, r.TokenID, r.Generation)
	if err != nil {
		return Recorded{}, err
	}
	reported := st.Reported != nil
	if reported && *st.Reported == a &&
		(a == token.ReportUnknown || deref(st.Status) == rec.Status && sameJSON(st.Body, body)) {
		rec.Replayed = true
		return rec, nil
	}
	switch {
	case !st.Leased:
		return Recorded{}, tokend.Refuse(token.ErrInvalidState, "cannot %s a token that was never leased", a.Verb())
	case r.Generation < st.Generation:
		return Recorded{}, token.ErrStaleGeneration
	case reported:
		return Recorded{}, tokend.Refuse(ErrReportConflict, "a different report (%s) was already recorded for generation %d", *st.Reported, r.Generation)
	case r.Generation > st.Generation:
		return Recorded{}, tokend.Refuse(token.ErrInvalidState, "generation %d was never granted", r.Generation)
	case st.State == token.Unknown:
		// The lease lapsed under the unknown policy: an operator decides.
		return Recorded{}, token.ErrOutcomeUnknown
	}
	return Recorded{}, tokend.Refuse(token.ErrInvalidState, "cannot %s a token that is %s", a.Verb(), st.State)
}

// sameJSON reports whether a and b are the same JSON value: equal in their
// RFC 8785 canonical form, whatever their member order or number spelling.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ca, err := token.Canonical(a, nil)
	if err != nil {
		return false
	}
	cb, err := token.Canonical(b, nil)
	return err == nil && bytes.Equal(ca, cb)
}

// Finish is FinishTx in a transaction of its own: the report's one
// statement, sent and committed in one round trip (no BEGIN or COMMIT of
// its own). A report that changed nothing costs one more, to tell why.
func Finish(ctx context.Context, pool *pgxpool.Pool, a token.Action, r Report) (Recorded, error) {
	return finish(ctx, pool, a, r)
}
