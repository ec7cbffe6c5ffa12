package consume

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// DefaultLockWait is Config.LockWait's default.
const DefaultLockWait = 5 * time.Second

// Config configures a Spender.
type Config struct {
	// Handlers runs atomic operations. Required.
	Handlers *Registry
	// Keys is the keyring the tokens' secrets are derived under, the
	// Issuer's. Required: a token derived under a key it no longer holds
	// (a retired key) is refused with token.ErrKeyRetired, whatever its
	// state, so that retiring a leaked key takes effect at spend too.
	Keys *token.Keyring
	// LockWait bounds how long a spend waits for a concurrent spend of the
	// same token to finish before answering token.ErrInProgress. Zero means
	// DefaultLockWait; negative leaves the connection's lock_timeout alone.
	LockWait time.Duration
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	if c.Handlers == nil {
		return errors.New("consume: Config.Handlers is required")
	}
	if c.Keys == nil {
		return errors.New("consume: Config.Keys is required: the keyring tokens are issued under")
	}
	return nil
}

// Spender spends tokens.
type Spender struct {
	handlers *Registry
	keys     *token.Keyring
	lockWait string // as set_config wants it, "" for none
}

// New returns a Spender configured by cfg.
func New(cfg Config) (*Spender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Spender{handlers: cfg.Handlers, keys: cfg.Keys}
	switch {
	case cfg.LockWait == 0:
		s.lockWait = strconv.FormatInt(DefaultLockWait.Milliseconds(), 10)
	case cfg.LockWait > 0:
		s.lockWait = strconv.FormatInt(max(cfg.LockWait.Milliseconds(), 1), 10)
	}
	return s, nil
}

// Handlers returns the registry s runs atomic operations with.
func (s *Spender) Handlers() *Registry { return s.handlers }

// Request spends one token.
type Request struct {
	Tenant    string // from the authenticated caller
	Secret    token.Secret
	Operation string // must be the token's operation
	Subject   string // must be the token's subject
	Payload   []byte // must match the token's payload digest, if it has one
	Actor     string // who spends, for the audit trail
}

// Response is the answer to a spend.
type Response struct {
	TokenID  string
	State    token.State
	Status   int    // the HTTP status to answer with
	Body     []byte // the stored outcome (or the lease grant), sent as is
	Replayed bool   // Body is the outcome of an earlier spend
	// Generation is the token's generation after the spend; with State it
	// versions what a cache may hold about the token.
	Generation int64
	Lease      *Lease // set when this spend was granted a lease
}

// Lease is the execution right a lease-mode spend grants. The holder quotes
// Generation when it completes, fails or reports unknown; OperationID is the
// idempotency key to give the downstream system, the same across takeovers.
type Lease struct {
	Generation  int64     `json:"generation"`
	ExpiresAt   time.Time `json:"lease_expires_at"`
	OperationID string    `json:"operation_id"`
}

// locked is the token row as read under its lock, with the policy it was
// issued under (Name, Mode, OnLeaseExpiry, LeaseSeconds, IgnoredFields).
type locked struct {
	id, operation, subject string
	keyID                  string // the server key its secret derives from
	state                  token.State
	generation             int64
	digest                 []byte
	expired                bool
	resultStatus           *int
	resultBody             []byte
	operationID            *string
	leaseLapsed            bool
	leaseLeftSeconds       *int
	policy                 operation.Policy
}

// SpendTx spends req's token inside tx, the caller's transaction: when tx
// commits, the token's new state and the handler's effect (and anything else
// the caller wrote in tx) commit together; when it rolls back, the token is
// spendable again. SpendTx never commits or rolls back tx.
//
// When SpendTx returns an error, the caller should roll back, except for
// token.ErrOutcomeUnknown, whose recorded transition is worth committing; the
// Response then names the token and its new state.
// A lock wait that timed out leaves tx aborted.
func (s *Spender) SpendTx(ctx context.Context, tx pgx.Tx, req Request) (Response, error) {
	t, err := lockedRow(store.LockTx(ctx, tx, req.Tenant, req.Secret.Hash(), s.lockWait))
	if err != nil {
		return Response{}, err
	}
	return s.spendLocked(ctx, tx, req, t, nil)
}

// spendLocked decides and makes the spend of t, locked in tx. With last not
// nil, the write that finishes an atomic spend is queued there for the
// caller to send with its COMMIT; the Response is what it will store.
func (s *Spender) spendLocked(ctx context.Context, tx pgx.Tx, req Request, t *locked, last *pgx.Batch) (Response, error) {
	// First: a secret derived under a retired key proves nothing, not even
	// enough to learn the token's binding, state or stored outcome.
	if err := s.keys.Check(t.keyID); err != nil {
		return Response{}, &KeyRetiredError{TokenID: t.id, KeyID: t.keyID}
	}
	if t.operation != req.Operation || t.subject != req.Subject {
		return Response{}, ErrBindingMismatch
	}
	switch t.state {
	case token.Revoked:
		return Response{}, token.ErrRevoked
	case token.Expired:
		return Response{}, token.ErrExpired
	}
	if t.digest != nil {
		// Said as such: "invalid payload: the JSON ends early" would not tell
		// the caller the token was issued for a payload.
		if len(bytes.TrimSpace(req.Payload)) == 0 {
			return Response{}, ErrPayloadMissing
		}
		d, err := token.Digest(req.Payload, t.policy.IgnoredFields)
		if err != nil {
			return Response{}, tokend.InvalidWith(ErrInvalidPayload, "payload", err)
		}
		if subtle.ConstantTimeCompare(d, t.digest) != 1 {
			return Response{}, ErrPayloadMismatch
		}
	}
	switch t.state {
	case token.Consumed, token.Failed:
		if t.resultStatus == nil {
			return Response{}, fmt.Errorf("consume: token %s is %s without a stored outcome", t.id, t.state)
		}
		return Response{TokenID: t.id, State: t.state, Status: *t.resultStatus, Body: t.resultBody, Replayed: true, Generation: t.generation}, nil
	case token.Unknown:
		return Response{}, token.ErrOutcomeUnknown
	case token.Pending:
		if !t.leaseLapsed {
			return Response{}, &InProgressError{RetryAfterSeconds: max(1, deref(t.leaseLeftSeconds))}
		}
		if t.policy.OnLeaseExpiry == operation.OnExpiryTakeover {
			return s.grantLease(ctx, tx, req, t, token.Takeover, last)
		}
		if err := store.Lapse(ctx, tx, req.Tenant, t.id, req.Actor); err != nil {
			return Response{}, err
		}
		return Response{TokenID: t.id, State: token.Unknown, Generation: t.generation}, token.ErrOutcomeUnknown
	case token.Issued:
		if t.expired {
			return Response{}, token.ErrExpired
		}
		if t.policy.Mode == operation.Lease {
			return s.grantLease(ctx, tx, req, t, token.Lease, last)
		}
		return s.execute(ctx, tx, req, t, last)
	}
	return Response{}, fmt.Errorf("consume: token %s in unexpected state %q", t.id, t.state)
}

// Spend is SpendTx in a transaction of its own, committed before it returns.
// Like SpendTx, it returns a Response naming the token along with
// token.ErrOutcomeUnknown.
//
// It costs three round trips for an atomic spend whose handler sends one:
// BEGIN goes with the lock, and the outcome's write with COMMIT. A lease
// grant costs two: BEGIN with the lock, the grant with COMMIT.
func (s *Spender) Spend(ctx context.Context, pool *pgxpool.Pool, req Request) (Response, error) {
	p, br, err := store.BeginPipelined(ctx, pool, func(b *pgx.Batch) {
		store.QueueLock(b, req.Tenant, req.Secret.Hash(), s.lockWait)
	})
	if err != nil {
		return Response{}, fmt.Errorf("consume: %w", err)
	}
	defer p.Rollback(context.WithoutCancel(ctx))
	t, err := lockedRow(store.ReadLock(br))
	if err != nil {
		return Response{}, err
	}
	last := &pgx.Batch{}
	resp, err := s.spendLocked(ctx, p.Tx(), req, t, last)
	if err != nil && !errors.Is(err, token.ErrOutcomeUnknown) {
		return Response{}, err
	}
	if resp.Replayed {
		// Nothing was written: a rollback releases the lock without waiting
		// for a WAL flush, which a commit of the lock would.
		return resp, nil
	}
	// The lapse to unknown is recorded even though the spend is refused.
	if cerr := p.Commit(ctx, last); cerr != nil {
		return Response{}, fmt.Errorf("consume: commit: %w", cerr)
	}
	if resp.Lease != nil {
		// The grant went with COMMIT; its row has been read now.
		return leaseGranted(resp)
	}
	return resp, err
}

// lockedRow is the locking read's answer as a spend takes it: the lock
// wait that ran out is another holder's spend in progress.
func lockedRow(l *store.Locked, err error) (*locked, error) {
	if errors.Is(err, store.ErrLockNotAvailable) {
		return nil, &InProgressError{RetryAfterSeconds: 1}
	}
	if err != nil {
		return nil, err
	}
	return &locked{
		id: l.ID, operation: l.Operation, subject: l.Subject, keyID: l.KeyID, state: l.State,
		generation: l.Generation, digest: l.Digest, expired: l.Expired,
		resultStatus: l.ResultStatus, resultBody: l.ResultBody, operationID: l.OperationID,
		leaseLapsed: l.LeaseLapsed, leaseLeftSeconds: l.LeaseLeftSeconds,
		policy: operation.Policy{Name: l.Operation, Mode: operation.Mode(l.Mode),
			OnLeaseExpiry: operation.ExpiryPolicy(l.OnLeaseExpiry), LeaseSeconds: l.LeaseSeconds, IgnoredFields: l.IgnoredFields},
	}, nil
}

func (s *Spender) execute(ctx context.Context, tx pgx.Tx, req Request, t *locked, last *pgx.Batch) (Response, error) {
	h, ok := s.handlers.Lookup(t.operation)
	if !ok {
		return Response{}, tokend.Refuse(ErrNoHandler, "%q", t.operation)
	}
	call := Call{Tenant: req.Tenant, TokenID: t.id, Operation: t.operation, Subject: t.subject, Payload: req.Payload}
	var out Outcome
	var err error
	if c, ok := h.(checkedHandler); ok && t.digest != nil {
		// spendLocked compared the payload's digest, which read it with
		// CheckPayload: the handler need not check it again.
		out, err = c.execute(ctx, tx, call, true)
	} else {
		out, err = h.Execute(ctx, tx, call)
	}
	if err != nil {
		return Response{}, fmt.Errorf("consume: %s: %w", t.operation, err)
	}
	action := token.Spend
	if !out.Succeeded() {
		action = token.SpendFail
	}
	to, err := token.Next(token.Issued, action)
	if err != nil {
		return Response{}, err
	}
	if err := token.CheckOutcomeStatus(to, out.Status); err != nil {
		// A handler bug, not the spender's: %v keeps it from being answered
		// as a bad request. The spend rolls back and stores nothing.
		return Response{}, fmt.Errorf("consume: %s: handler outcome cannot be stored: %v", t.operation, err)
	}
	body, err := OutcomeBody{TokenID: t.id, State: to, Result: out.Result}.Encode()
	if err != nil {
		return Response{}, fmt.Errorf("consume: %s: encode result: %w", t.operation, err)
	}
	if err := store.Finish(ctx, tx, last, store.FinishParams{
		Tenant: req.Tenant, TokenID: t.id, To: to, Status: out.Status, Body: body,
		Actor: req.Actor, Action: action, From: token.Issued,
	}); err != nil {
		return Response{}, err
	}
	return Response{TokenID: t.id, State: to, Status: out.Status, Body: body, Generation: t.generation}, nil
}

// OutcomeBody is the stored and replayed response body of a finished token;
// it moved to token, where admin's reconcile finds it too.
type OutcomeBody = token.OutcomeBody

func encodeStored(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
