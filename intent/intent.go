// Package intent issues tokens, one per business intent. Issuing is keyed by
// (tenant, operation, intent ID): asking again for the same intent returns
// the same token, asking with the same intent ID for something else is refused.
package intent

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// APIVersion is part of every fingerprint: a request under a future API
// version is a different request even with the same fields.
const APIVersion = "v1"

// Limits on request fields.
const (
	MaxIntentIDLen = 255
	MaxSubjectLen  = 255
)

var (
	// ErrKeyReused: the intent ID was already used for a different request
	// (operation, subject, payload or ttl differ).
	ErrKeyReused = errors.New("intent: idempotency key reused with a different request")
	// ErrInvalidRequest: the request is malformed; nothing was written.
	ErrInvalidRequest = errors.New("intent: invalid request")
	// ErrOperationChanging: the operation was redeclared again and again
	// while the token was being issued; nothing was written. The same
	// request succeeds once the declarations settle: retry it shortly.
	ErrOperationChanging = errors.New("intent: operation is being redeclared")

	// ErrKeyRetired: the intent's token was derived under a server key that
	// has been retired, so it can be neither returned nor spent. Its intent
	// ID stays taken until the intent's retention passes. The error names
	// the token: look up its state before starting over with a new intent
	// ID, since a consumed token did its effect and a new intent would do
	// it again. It matches token.ErrKeyRetired too.
	ErrKeyRetired = fmt.Errorf("intent: its token cannot be returned: %w", token.ErrKeyRetired)
)

// Request asks for a token for one business intent.
type Request struct {
	Tenant     string // from the authenticated caller, never from the request body
	Operation  string
	IntentID   string // the client's Idempotency-Key
	Subject    string // the end user the token is for
	TTLSeconds int
	Payload    []byte // optional JSON; when set, a spend must present an equal payload
	Actor      string // who asks, for the audit trail (an API key id)
}

// Validate checks the fields that need no policy, wrapping ErrInvalidRequest.
func (r Request) Validate() error {
	if err := token.CheckText("tenant", r.Tenant, "operation", r.Operation, "Idempotency-Key", r.IntentID, "subject", r.Subject, "actor", r.Actor); err != nil {
		return tokend.InvalidWith(ErrInvalidRequest, "", err)
	}
	switch {
	case r.Tenant == "":
		return tokend.Invalid(ErrInvalidRequest, "tenant", "is empty")
	case r.Operation == "":
		return tokend.Invalid(ErrInvalidRequest, "operation", "is required")
	case !printable(r.IntentID, MaxIntentIDLen):
		return tokend.Invalid(ErrInvalidRequest, "Idempotency-Key", fmt.Sprintf("must be 1 to %d printable characters", MaxIntentIDLen))
	case !printable(r.Subject, MaxSubjectLen):
		return tokend.Invalid(ErrInvalidRequest, "subject", fmt.Sprintf("must be 1 to %d printable characters", MaxSubjectLen))
	case r.TTLSeconds <= 0:
		return tokend.Invalid(ErrInvalidRequest, "ttl_seconds", "must be a positive integer")
	}
	return nil
}

func printable(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range s {
		if !unicode.IsPrint(c) || c == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// Issued is the outcome of an issue request.
type Issued struct {
	Token    token.Record
	Secret   token.Secret
	Replayed bool // the intent was known: this is the token issued before
}

// Issuer issues tokens whose secrets derive from its keyring.
type Issuer struct {
	keys *token.Keyring
	// policies spares each issue a policy lookup; store.Issue checks the
	// cached policy's version, so a stale one is never used.
	policies *operation.Cache
	handlers Handlers // nil: no built-ins; payloads are only checked to be JSON
}

// Handlers is what an Issuer needs of the program's handlers:
// *consume.Registry is one.
type Handlers interface {
	// operation.Handlers gives the built-in operations, issued without a
	// declaration of the tenant's own.
	operation.Handlers
	// Validate checks, before a token is issued, the payload an atomic
	// operation's handler would get: it returns an error (wrapping
	// consume.ErrInvalidPayload) when the handler would refuse it, so that a
	// token that could never be spent is never issued.
	Validate(operation string, payload []byte) error
}

// checkedValidator is Handlers that can validate a payload the payload
// digest has just read (with jsonread.CheckPayload) without checking it
// again: *consume.Registry is one.
type checkedValidator interface {
	ValidateChecked(operation string, payload []byte) error
}

// Option configures an Issuer.
type Option func(*Issuer)

// WithHandlers has the Issuer issue h's built-in operations, and refuse,
// with ErrInvalidRequest, a payload h refuses for an operation in atomic
// mode. tokend serve passes its handlers.
func WithHandlers(h Handlers) Option {
	return func(is *Issuer) { is.handlers = h }
}

// NewIssuer returns an Issuer deriving secrets under keys.
func NewIssuer(keys *token.Keyring, opts ...Option) *Issuer {
	is := &Issuer{keys: keys, policies: operation.NewCache()}
	for _, o := range opts {
		o(is)
	}
	return is
}

// errStalePolicy: the cached policy a candidate was built under has changed.
var errStalePolicy = errors.New("intent: operation policy changed")

// policyAttempts bounds how often an issue rebuilds its candidate after
// finding the policy changed under it; each attempt reads the policy anew.
const policyAttempts = 3

// IssueTx issues the token for req inside the caller's transaction, or
// returns the one already issued for the same intent. After the intent's
// retention has passed, the intent is forgotten and a new token is issued.
func (is *Issuer) IssueTx(ctx context.Context, tx pgx.Tx, req Request) (Issued, error) {
	return is.retryStale(req, func() (Issued, error) {
		c, err := is.prepare(ctx, tx, req)
		if err != nil {
			return is.replay(ctx, tx, req, err)
		}
		if out, ok, err := c.insert(ctx, tx); err != nil || ok {
			return out, err
		}
		return is.resolve(ctx, tx, c)
	})
}

// Issue is IssueTx in a transaction of its own. The common case, a new intent,
// costs a single statement.
func (is *Issuer) Issue(ctx context.Context, pool *pgxpool.Pool, req Request) (Issued, error) {
	return is.retryStale(req, func() (Issued, error) {
		c, err := is.prepare(ctx, pool, req)
		if err != nil {
			return is.replay(ctx, pool, req, err)
		}
		if out, ok, err := c.insert(ctx, pool); err != nil || ok {
			return out, err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return Issued{}, fmt.Errorf("intent: begin: %w", err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
		out, err := is.resolve(ctx, tx, c)
		if err != nil || out.Replayed {
			// A replay or a refusal wrote nothing: rolling back skips the WAL
			// flush a commit of the row lock would wait for.
			return out, err
		}
		if err := tx.Commit(ctx); err != nil {
			return Issued{}, fmt.Errorf("intent: commit: %w", err)
		}
		return out, nil
	})
}

// retryStale runs issue until it is not refused for a stale policy,
// dropping the cached policy before each new attempt.
func (is *Issuer) retryStale(req Request, issue func() (Issued, error)) (Issued, error) {
	for range policyAttempts {
		out, err := issue()
		if !errors.Is(err, errStalePolicy) {
			return out, err
		}
		is.policies.Forget(req.Tenant, req.Operation)
	}
	return Issued{}, fmt.Errorf("%w: %q changed %d times during one issue; retry", ErrOperationChanging, req.Operation, policyAttempts)
}

// candidate is a token ready to insert.
type candidate struct {
	req         Request
	policy      operation.Policy
	id          string
	nonce       []byte
	keyID       string
	secret      token.Secret
	digest      []byte
	fingerprint []byte
}

func (is *Issuer) prepare(ctx context.Context, q db.DBTX, req Request) (*candidate, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	p, err := is.policies.Get(ctx, q, req.Tenant, req.Operation, is.handlers)
	if err != nil {
		return nil, err
	}
	if req.TTLSeconds > p.MaxTTLSeconds {
		// A refusal is an answer too: make sure it is not the cache's.
		is.policies.Forget(req.Tenant, req.Operation)
		if p, err = is.policies.Get(ctx, q, req.Tenant, req.Operation, is.handlers); err != nil {
			return nil, err
		}
	}
	if req.TTLSeconds > p.MaxTTLSeconds {
		return nil, tokend.Invalid(ErrInvalidRequest, "ttl_seconds", fmt.Sprintf("%d exceeds %s's maximum of %d", req.TTLSeconds, p.Name, p.MaxTTLSeconds))
	}
	c := &candidate{req: req, policy: p, id: token.NewID(), nonce: token.NewNonce(), keyID: is.keys.CurrentKeyID()}
	if c.digest, c.fingerprint, err = fingerprint(req, p.IgnoredFields); err != nil {
		return nil, err
	}
	if req.Payload != nil && p.Mode == operation.Atomic && is.handlers != nil {
		validate := is.handlers.Validate
		if cv, ok := is.handlers.(checkedValidator); ok {
			// fingerprint's digest read the payload with CheckPayload.
			validate = cv.ValidateChecked
		}
		if err := validate(req.Operation, req.Payload); err != nil {
			return nil, tokend.InvalidWith(ErrInvalidRequest, "", err)
		}
	}
	if c.secret, err = is.keys.Derive(c.keyID, req.Tenant, c.id, c.nonce); err != nil {
		return nil, err
	}
	return c, nil
}

// fingerprint returns req's payload digest, with the ignored fields left
// out, and the fingerprint that makes two requests for an intent the same.
func fingerprint(req Request, ignored []string) (digest, fp []byte, err error) {
	if req.Payload != nil {
		if digest, err = token.Digest(req.Payload, ignored); err != nil {
			return nil, nil, tokend.InvalidWith(ErrInvalidRequest, "payload", err)
		}
	}
	return digest, token.Fingerprint(req.Operation, req.Subject, digest, req.TTLSeconds, APIVersion), nil
}

// existing is the token holding an intent, as store's existingSQL and store's replaySQL read it.
type existing struct {
	rec                token.Record
	fingerprint, nonce []byte
	keyID              string
	ignored            []string
	forgotten          bool
}

// readExisting is store.ReadExisting for req's intent.
func readExisting(ctx context.Context, q db.DBTX, lock bool, req Request) (existing, bool, error) {
	e, ok, err := store.ReadExisting(ctx, q, lock, req.Tenant, req.Operation, req.IntentID)
	return existing{rec: e.Record, fingerprint: e.Fingerprint, nonce: e.Nonce, keyID: e.KeyID, ignored: e.Ignored, forgotten: e.Forgotten}, ok, err
}

// same reports whether req is the request e was issued for. The comparison
// uses the ignored fields e was issued under, not the operation's current
// ones: a redeclaration does not turn a retry into another request.
func (e existing) same(req Request, current []string, currentFP []byte) bool {
	fp := currentFP
	if !slices.Equal(e.ignored, current) || fp == nil {
		var err error
		if _, fp, err = fingerprint(req, e.ignored); err != nil {
			return false
		}
	}
	return subtle.ConstantTimeCompare(e.fingerprint, fp) == 1
}

// replayed answers with the token e, the secret derived anew.
func (is *Issuer) replayed(req Request, e existing) (Issued, error) {
	secret, err := is.keys.Derive(e.keyID, req.Tenant, e.rec.ID, e.nonce)
	if errors.Is(err, token.ErrKeyRetired) {
		return Issued{}, tokend.Refuse(ErrKeyRetired, "token %s", e.rec.ID)
	}
	if err != nil {
		return Issued{}, fmt.Errorf("intent: re-derive secret: %w", err)
	}
	rec := e.rec
	rec.Tenant, rec.Operation, rec.IntentID = req.Tenant, req.Operation, req.IntentID
	return Issued{Token: rec, Secret: secret, Replayed: true}, nil
}

// replay answers a request that the operation's current policy refuses
// (refusal: unknown operation, ttl over the maximum, a payload its handler
// refuses) with the token already issued for the same request under the
// policy of the time, if there is one: a retry keeps getting the answer the
// first request got. Anything else gets the refusal.
func (is *Issuer) replay(ctx context.Context, q db.DBTX, req Request, refusal error) (Issued, error) {
	if (!errors.Is(refusal, operation.ErrUnknown) && !errors.Is(refusal, ErrInvalidRequest)) ||
		req.Validate() != nil || !operation.ValidName(req.Operation) {
		return Issued{}, refusal
	}
	e, ok, err := readExisting(ctx, q, false, req)
	switch {
	case err != nil:
		return Issued{}, err
	case !ok:
		return Issued{}, refusal
	case e.forgotten || !e.same(req, nil, nil):
		return Issued{}, refusal
	}
	return is.replayed(req, e)
}

// insert tries to claim the intent. ok is false when it was already claimed;
// the error is errStalePolicy when c's policy is no longer the operation's.
func (c *candidate) insert(ctx context.Context, q store.Batcher) (Issued, bool, error) {
	r := c.req
	rec := token.Record{
		Tenant: r.Tenant, ID: c.id, Operation: r.Operation, IntentID: r.IntentID,
		Subject: r.Subject, State: token.Issued, PayloadDigest: c.digest,
	}
	out, err := store.Issue(ctx, q, store.IssueParams{
		Tenant: r.Tenant, ID: c.id, Operation: r.Operation, IntentID: r.IntentID, Subject: r.Subject,
		SecretHash: c.secret.Hash(), Nonce: c.nonce, KeyID: c.keyID, Fingerprint: c.fingerprint, Digest: c.digest,
		TTLSeconds: r.TTLSeconds, RetentionSeconds: c.policy.RetentionSeconds, Actor: r.Actor, PolicyVersion: c.policy.Version,
		Mode: string(c.policy.Mode), OnLeaseExpiry: string(c.policy.OnLeaseExpiry), LeaseSeconds: c.policy.LeaseSeconds,
		IgnoredFields: c.policy.IgnoredFields, EventOutcome: c.policy.EventOutcome,
	})
	switch {
	case errors.Is(err, store.ErrStalePolicy):
		return Issued{}, false, errStalePolicy
	case err != nil:
		return Issued{}, false, err
	case out.CreatedAt == nil:
		return Issued{}, false, nil // the intent is taken
	}
	rec.CreatedAt, rec.ExpiresAt, rec.RetainUntil = *out.CreatedAt, *out.ExpiresAt, *out.RetainUntil
	return Issued{Token: rec, Secret: c.secret}, true, nil
}

// resolve handles an intent that was already claimed: replay, refuse, or
// forget it when its retention has passed and claim it anew.
func (is *Issuer) resolve(ctx context.Context, tx pgx.Tx, c *candidate) (Issued, error) {
	// Bounded: each round either finds a row or inserts; only a concurrent
	// purge or re-issue of the same intent makes another round necessary.
	for range 3 {
		e, ok, err := readExisting(ctx, tx, true, c.req)
		switch {
		case err != nil:
			return Issued{}, err
		case !ok:
			// Purged between our insert and this read: claim it again.
		case e.forgotten:
			if err := store.Forget(ctx, tx, c.req.Tenant, e.rec.ID, c.req.Actor); err != nil {
				return Issued{}, err
			}
		case !e.same(c.req, c.policy.IgnoredFields, c.fingerprint):
			return Issued{}, ErrKeyReused
		default:
			return is.replayed(c.req, e)
		}
		if out, ok, err := c.insert(ctx, tx); err != nil || ok {
			return out, err
		}
	}
	return Issued{}, fmt.Errorf("intent: %q kept changing under concurrent re-issue; retry", c.req.IntentID)
}
