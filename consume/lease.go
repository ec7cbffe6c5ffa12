package consume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/token"
)

// grantLease hands execution rights of a lease-mode token to this spender: a
// new generation, a lease end by the database clock, and the downstream
// operation id, which a takeover keeps so the downstream can deduplicate.
func (s *Spender) grantLease(ctx context.Context, tx pgx.Tx, req Request, t *locked, a token.Action) (Response, error) {
	to, err := token.Next(t.state, a)
	if err != nil {
		return Response{}, err
	}
	opID := deref(t.operationID)
	if opID == "" {
		opID = token.NewOperationID()
	}
	l := &Lease{}
	err = tx.QueryRow(ctx, leaseSQL, req.Tenant, t.id, t.policy.LeaseSeconds, opID, req.Actor, a, t.state).
		Scan(&l.Generation, &l.ExpiresAt, &l.OperationID)
	if err != nil {
		return Response{}, fmt.Errorf("consume: grant lease: %w", err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	body, err := json.Marshal(struct {
		TokenID string      `json:"token_id"`
		State   token.State `json:"state"`
		*Lease
	}{t.id, to, l})
	if err != nil {
		return Response{}, err
	}
	return Response{TokenID: t.id, State: to, Status: http.StatusAccepted, Body: body, Generation: l.Generation, Lease: l}, nil
}

// Report is a lease holder's account of what happened downstream.
type Report struct {
	Tenant     string
	TokenID    string
	Generation int64 // the generation the holder was granted
	Status     int   // Complete: a 2xx, default 200; Fail: a 4xx or 5xx, default 422
	Result     any   // Complete: the result; Fail: the error; stored and replayed
	Actor      string
}

// FinishTx records a lease holder's report inside tx: token.Complete,
// token.Fail or token.ReportUnknown. The generation check and the state change
// are one conditional UPDATE, so a holder whose lease was taken over gets
// token.ErrStaleGeneration and writes nothing. Repeating a report that was
// already recorded replays its stored outcome.
func FinishTx(ctx context.Context, tx pgx.Tx, a token.Action, r Report) (Response, error) {
	to, err := token.Next(token.Pending, a)
	if err != nil {
		return Response{}, err
	}
	var body []byte
	status := r.Status
	switch a {
	case token.Complete:
		if status == 0 {
			status = http.StatusOK
		}
		if status < 200 || status > 299 {
			return Response{}, fmt.Errorf("%w: complete needs a 2xx status, got %d", ErrInvalidPayload, status)
		}
		body, err = json.Marshal(OutcomeBody{TokenID: r.TokenID, State: to, Result: r.Result})
	case token.Fail:
		if status == 0 {
			status = http.StatusUnprocessableEntity
		}
		if status < 400 || status > 599 {
			return Response{}, fmt.Errorf("%w: fail needs a 4xx or 5xx status, got %d", ErrInvalidPayload, status)
		}
		body, err = json.Marshal(OutcomeBody{TokenID: r.TokenID, State: to, Error: r.Result})
	case token.ReportUnknown:
		status = http.StatusOK
		body, err = json.Marshal(struct {
			TokenID    string      `json:"token_id"`
			State      token.State `json:"state"`
			Generation int64       `json:"generation"`
		}{r.TokenID, to, r.Generation})
	}
	if err != nil {
		return Response{}, err
	}

	var sql string
	var args []any
	if a == token.ReportUnknown {
		sql, args = reportUnknownSQL, []any{r.Tenant, r.TokenID, r.Generation, r.Actor}
	} else {
		sql, args = finishLeaseSQL, []any{r.Tenant, r.TokenID, r.Generation, to, status, body, r.Actor, a}
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return Response{}, fmt.Errorf("consume: %s: %w", a, err)
	}
	if tag.RowsAffected() == 1 {
		return Response{TokenID: r.TokenID, State: to, Status: status, Body: body, Generation: r.Generation}, nil
	}
	return explainFinish(ctx, tx, a, r)
}

// explainFinish tells why a report changed nothing: a replay of a report
// already recorded, or an error.
func explainFinish(ctx context.Context, tx pgx.Tx, a token.Action, r Report) (Response, error) {
	var (
		state      token.State
		generation int64
		status     *int
		body       []byte
	)
	err := tx.QueryRow(ctx, finishStateSQL, r.Tenant, r.TokenID).Scan(&state, &generation, &status, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return Response{}, token.ErrNotFound
	}
	if err != nil {
		return Response{}, fmt.Errorf("consume: %s: %w", a, err)
	}
	if generation != r.Generation {
		return Response{}, token.ErrStaleGeneration
	}
	switch {
	case a == token.Complete && state == token.Consumed, a == token.Fail && state == token.Failed:
		return Response{TokenID: r.TokenID, State: state, Status: deref(status), Body: body, Replayed: true, Generation: generation}, nil
	case state == token.Unknown:
		return Response{}, token.ErrOutcomeUnknown
	}
	return Response{}, fmt.Errorf("%w: cannot %s a token that is %s", token.ErrInvalidState, a, state)
}

// Finish is FinishTx in a transaction of its own.
func Finish(ctx context.Context, pool *pgxpool.Pool, a token.Action, r Report) (Response, error) {
	var resp Response
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		resp, err = FinishTx(ctx, tx, a, r)
		return err
	})
	return resp, err
}
