package consume

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/store"
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
	args := []any{req.Tenant, t.id, t.policy.LeaseSeconds, opID, req.Actor, a, t.state}
	scan := func(row pgx.Row) error {
		if err := row.Scan(&l.Generation, &l.ExpiresAt, &l.OperationID); err != nil {
			return fmt.Errorf("consume: grant lease: %w", err)
		}
		l.ExpiresAt = l.ExpiresAt.UTC()
		return nil
	}
	resp := Response{TokenID: t.id, State: to, Status: http.StatusAccepted, Lease: l}
	if last != nil {
		last.Queue(store.LeaseSQL, args...).QueryRow(scan)
		return resp, nil
	}
	if err := scan(tx.QueryRow(ctx, store.LeaseSQL, args...)); err != nil {
		return Response{}, err
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
func finish(ctx context.Context, q db.DBTX, a token.Action, r Report) (Recorded, error) {
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

	var sql string
	var args []any
	if a == token.ReportUnknown {
		sql, args = store.ReportUnknownSQL, []any{r.Tenant, r.TokenID, r.Generation, r.Actor}
	} else {
		sql, args = store.FinishLeaseSQL, []any{r.Tenant, r.TokenID, r.Generation, to, status, body, r.Actor, a}
	}
	tag, err := q.Exec(ctx, sql, args...)
	if err != nil {
		return Recorded{}, fmt.Errorf("consume: %s: %w", a, err)
	}
	if tag.RowsAffected() == 1 {
		return rec, nil
	}
	return explainFinish(ctx, q, a, r, rec, body)
}

// explainFinish tells why a report changed nothing: the same report was
// already recorded (a replay), or an error. rec and body are what the report
// would have recorded and stored.
func explainFinish(ctx context.Context, q db.DBTX, a token.Action, r Report, rec Recorded, body []byte) (Recorded, error) {
	var (
		state        token.State
		generation   int64
		status       *int
		storedBody   []byte
		leased       bool
		reportedKind *token.Action
	)
	err := q.QueryRow(ctx, store.ReportStateSQL, r.Tenant, r.TokenID, r.Generation).
		Scan(&state, &generation, &status, &storedBody, &leased, &reportedKind)
	if err := db.RowError(err, token.ErrNotFound, "consume: "+string(a)); err != nil {
		return Recorded{}, err
	}
	reported := reportedKind != nil
	if reported && *reportedKind == a &&
		(a == token.ReportUnknown || deref(status) == rec.Status && sameJSON(storedBody, body)) {
		rec.Replayed = true
		return rec, nil
	}
	switch {
	case !leased:
		return Recorded{}, tokend.Refuse(token.ErrInvalidState, "cannot %s a token that was never leased", a)
	case r.Generation < generation:
		return Recorded{}, token.ErrStaleGeneration
	case reported:
		return Recorded{}, tokend.Refuse(ErrReportConflict, "a different report (%s) was already recorded for generation %d", *reportedKind, r.Generation)
	case r.Generation > generation:
		return Recorded{}, tokend.Refuse(token.ErrInvalidState, "generation %d was never granted", r.Generation)
	case state == token.Unknown:
		// The lease lapsed under the unknown policy: an operator decides.
		return Recorded{}, token.ErrOutcomeUnknown
	}
	return Recorded{}, tokend.Refuse(token.ErrInvalidState, "cannot %s a token that is %s", a, state)
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
