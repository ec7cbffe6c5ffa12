package form

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

// FieldName is the name of the hidden field that carries a form's token.
const FieldName = "tokend_token"

// DefaultTTL is Config.TTL's default: how long a rendered form can be
// submitted.
const DefaultTTL = 30 * time.Minute

// Actor is recorded in the audit trail of the tokens this package issues and
// spends.
const Actor = "form"

// maxMemory bounds the part of a multipart form held in memory.
const maxMemory = 1 << 20

// Config configures a Protector.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Issuer issues the forms' tokens. Required.
	Issuer *intent.Issuer
	// Spender spends them. It must have a handler for Operation. Required.
	Spender *consume.Spender
	// Tenant owns the tokens. Required.
	Tenant string
	// Operation is what a submit does, for example checkout.submit. It must be
	// an atomic operation: its effect is the handler's, in the spend's
	// transaction. Required.
	Operation string
	// TTL is how long a rendered form can be submitted; it must not exceed
	// the operation's max_ttl_seconds. Default DefaultTTL.
	TTL time.Duration
	// Payload turns the submitted fields (without the token field) into the
	// JSON the operation's handler gets. An error refuses the submit with
	// ErrInvalid and leaves the token unspent, unless an earlier submit of
	// the same rendering was carried out: then that outcome is the answer.
	// Default: a JSON object of the fields, each a string, or an array of
	// strings when the field was sent more than once.
	Payload func(fields url.Values) ([]byte, error)
	// Changed, when set, is told of every token a submit moved, after the
	// commit and before the submit is answered, so a cache in front of the
	// same tokens can drop its copy (read-your-writes).
	Changed func(ctx context.Context, tenant string, resp consume.Response)
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("form: Config.Pool is required")
	case c.Issuer == nil:
		return errors.New("form: Config.Issuer is required")
	case c.Spender == nil:
		return errors.New("form: Config.Spender is required")
	case c.Tenant == "":
		return errors.New("form: Config.Tenant is required")
	case c.Operation == "":
		return errors.New("form: Config.Operation is required")
	case c.TTL < 0:
		return fmt.Errorf("form: Config.TTL is %v, want 0 (the default) or more", c.TTL)
	case c.TTL > 0 && c.TTL < time.Second:
		return fmt.Errorf("form: Config.TTL is %v, want at least a second", c.TTL)
	}
	return nil
}

// Protector issues and spends the tokens of one form.
type Protector struct {
	pool       *pgxpool.Pool
	issuer     *intent.Issuer
	spender    *consume.Spender
	changed    func(context.Context, string, consume.Response)
	tenant     string
	operation  string
	ttlSeconds int
	payload    func(url.Values) ([]byte, error)
}

// New returns a Protector configured by cfg.
func New(cfg Config) (*Protector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Protector{
		pool:      cfg.Pool,
		issuer:    cfg.Issuer,
		spender:   cfg.Spender,
		changed:   cfg.Changed,
		tenant:    cfg.Tenant,
		operation: cfg.Operation,
		payload:   cfg.Payload,
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	p.ttlSeconds = int(ttl.Round(time.Second) / time.Second)
	if p.payload == nil {
		p.payload = fieldsJSON
	}
	return p, nil
}

// Issue issues the token of a rendering of the form for subject, the
// signed-in user, and returns the hidden field that carries it.
//
// The rendering is the one a GET request names in its RenderParam, so that
// fetching the page again (a reload, Back after the browser dropped its copy)
// gets the same token back; without one, or for any other method, it is a
// new rendering.
func (p *Protector) Issue(r *http.Request, subject string) (Field, error) {
	if subject == "" {
		return Field{}, ErrNoSubject
	}
	render, ok := renderOf(r)
	if !ok {
		render = newRender()
	}
	out, err := p.issuer.Issue(r.Context(), p.pool, intent.Request{
		Tenant:     p.tenant,
		Operation:  p.operation,
		IntentID:   intentID(subject, render),
		Subject:    subject,
		TTLSeconds: p.ttlSeconds,
		Actor:      Actor,
	})
	if err != nil {
		return Field{}, fmt.Errorf("form: issue: %w", err)
	}
	return Field{TokenID: out.Token.ID, ExpiresAt: out.Token.ExpiresAt, secret: out.Secret}, nil
}

// Spend carries out the submitted form r for subject, the signed-in user, or
// returns the outcome of the submit of the same rendering that did.
//
// An error matching ErrStale or ErrInvalid means nothing was done; any other
// error means the outcome is not known yet (token.ErrInProgress: another
// submit of the form is running; token.ErrOutcomeUnknown), or tokend failed.
// Never answer those with a fresh form: a submit of it could do the effect a
// second time.
func (p *Protector) Spend(r *http.Request, subject string) (Result, error) {
	if subject == "" {
		return Result{}, ErrNoSubject
	}
	if err := r.ParseMultipartForm(maxMemory); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return Result{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	secret, err := token.ParseSecret(r.PostForm.Get(FieldName))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrStale, ErrNoToken)
	}
	fields := make(url.Values, len(r.PostForm))
	for k, v := range r.PostForm {
		if k != FieldName {
			fields[k] = v
		}
	}
	// A browser gives up on a submit when the next one starts (a double
	// click), and that cancels the first request's context. Finishing the
	// spend anyway lets the later submit replay it rather than race its
	// rollback; the spend is bounded by the Spender's lock wait.
	ctx := context.WithoutCancel(r.Context())
	req := consume.Request{Tenant: p.tenant, Secret: secret, Operation: p.operation, Subject: subject, Actor: Actor}
	if req.Payload, err = p.payload(fields); err != nil {
		return p.replay(ctx, req, err)
	}
	resp, err := p.spender.Spend(ctx, p.pool, req)
	if err == nil && !resp.Replayed && p.changed != nil {
		p.changed(ctx, p.tenant, resp)
	}
	return p.result(resp, err)
}

// replay answers a submit whose values Config.Payload refused. When an
// earlier submit of the same rendering was carried out (Back, change a field,
// submit again), its outcome is the answer, as for any other resubmit. To
// find it, replay spends with no payload in a transaction it rolls back, so
// that a handler that runs on no payload leaves nothing behind.
func (p *Protector) replay(ctx context.Context, req consume.Request, refused error) (Result, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("form: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back whatever happened
	res, err := p.result(p.spender.SpendTx(ctx, tx, req))
	switch {
	case err == nil && res.Replayed:
		return res, nil
	case err == nil, errors.Is(err, ErrInvalid):
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, refused)
	}
	return Result{}, err
}

// result translates a spend's answer.
func (p *Protector) result(resp consume.Response, err error) (Result, error) {
	switch {
	case errors.Is(err, token.ErrNotFound), errors.Is(err, token.ErrExpired),
		errors.Is(err, token.ErrRevoked), errors.Is(err, token.ErrKeyRetired),
		errors.Is(err, consume.ErrBindingMismatch):
		return Result{}, fmt.Errorf("%w: %w", ErrStale, err)
	case errors.Is(err, consume.ErrInvalidPayload):
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case err != nil:
		return Result{}, fmt.Errorf("form: spend: %w", err)
	case resp.Lease != nil:
		return Result{}, fmt.Errorf("form: %s is a lease-mode operation; a form needs an atomic one", p.operation)
	}
	return Result{TokenID: resp.TokenID, State: resp.State, Status: resp.Status, Body: resp.Body, Replayed: resp.Replayed}, nil
}
