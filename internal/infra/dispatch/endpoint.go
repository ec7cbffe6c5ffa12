package dispatch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// Errors of the endpoint calls, checkable with errors.Is.
var (
	ErrNotFound       = errors.New("dispatch: no such webhook endpoint")
	ErrInvalidRequest = errors.New("dispatch: invalid request")
	// ErrHostNotAllowed: the URL's host is not one deliveries may go to.
	ErrHostNotAllowed = errors.New("dispatch: host not allowed")
	// ErrTooManyEndpoints: the tenant has Options.MaxEndpoints already.
	ErrTooManyEndpoints = errors.New("dispatch: too many webhook endpoints")
)

// Defaults of Options.
const (
	DefaultMaxEndpoints  = 32
	DefaultSecretOverlap = 24 * time.Hour
)

// Options are the server's rules for registering endpoints.
type Options struct {
	// AllowedHosts is TOKEND_WEBHOOK_ALLOWED_HOSTS, as in Config.
	AllowedHosts []string
	// MaxEndpoints caps a tenant's endpoints. Defaults to 32.
	MaxEndpoints int
	// SecretOverlap is how long a rotated-out secret keeps signing beside
	// the new one. Defaults to 24 h.
	SecretOverlap time.Duration
}

// Validate reports whether o is usable.
func (o Options) Validate() error {
	if o.MaxEndpoints < 0 || o.SecretOverlap < 0 {
		return errors.New("dispatch: Options.MaxEndpoints and SecretOverlap must not be negative")
	}
	return CheckAllowedHosts(o.AllowedHosts)
}

func (o Options) withDefaults() Options {
	o.MaxEndpoints = cmp.Or(o.MaxEndpoints, DefaultMaxEndpoints)
	o.SecretOverlap = cmp.Or(o.SecretOverlap, DefaultSecretOverlap)
	return o
}

// EventTypes are the event types an endpoint may ask for.
var EventTypes = []string{"issued", "spend", "spend_fail", "lease", "takeover", "complete", "fail",
	"report_unknown", "lease_lapse", "reconcile_succeeded", "reconcile_not_executed", "reconcile_failed",
	"revoke", "expire", "purged"}

// Endpoint is a registered webhook endpoint.
type Endpoint struct {
	Tenant     string
	ID         string
	URL        string
	EventTypes []string // empty: all
	Enabled    bool
	// DisabledReason says why a disabled endpoint is: "operator", or the
	// failure run that disabled it.
	DisabledReason string
	// FeedPosition is the last event position offered to the endpoint.
	FeedPosition int64
	FailingSince *time.Time
	CreatedAt    time.Time
	// PreviousSecretUntil, after a rotation, is when the secret it replaced
	// stops signing beside the current one; nil outside an overlap.
	PreviousSecretUntil *time.Time

	nonce []byte
	keyID string
}

// Secret is the endpoint's signing secret, derived from the server key it
// was created under; it is never stored.
func (e Endpoint) Secret(keys *token.Keyring) (string, error) {
	return secret(keys, e.keyID, e.Tenant, e.ID, e.nonce)
}

func secret(keys *token.Keyring, keyID, tenant, id string, nonce []byte) (string, error) {
	s, err := keys.Derive(keyID, tenant, "webhook:"+id, nonce)
	if err != nil {
		return "", err
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s.Reveal(), token.SecretPrefix))
	if err != nil {
		return "", fmt.Errorf("dispatch: derive the secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(raw), nil
}

// CheckURL checks that raw is an absolute http(s) URL with a port from 1
// to 65535, whose host, as far as the URL alone shows, is one deliveries
// may go to under allowed (TOKEND_WEBHOOK_ALLOWED_HOSTS). A host name is
// judged again, by the address it resolves to, at every attempt.
func CheckURL(raw string, allowed []string) error {
	p, err := newPolicy(allowed)
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Fragment != "" || u.Opaque != "":
		return fmt.Errorf("%w: url %q: want an absolute http or https URL", ErrInvalidRequest, raw)
	case u.User != nil:
		return fmt.Errorf("%w: url: credentials in a URL would be stored; use a secret path or the signature", ErrInvalidRequest)
	}
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strings.HasPrefix(port, "0") || strings.HasPrefix(port, "+") {
			return fmt.Errorf("%w: url: port %q: want a number from 1 to 65535", ErrInvalidRequest, port)
		}
	}
	return p.checkHost(u.Hostname())
}

// NewEndpoint is what Create registers.
type NewEndpoint struct {
	URL        string
	EventTypes []string
}

// Create registers an endpoint for tenant and answers it with its signing
// secret, which is shown this once. It is offered the events from the
// tenant's current feed position on.
func Create(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, allowed []string, tenant string, n NewEndpoint) (Endpoint, string, error) {
	return CreateWith(ctx, pool, keys, Options{AllowedHosts: allowed}, tenant, n)
}

// CreateWith is Create under the server's Options: a tenant with
// MaxEndpoints endpoints gets ErrTooManyEndpoints.
func CreateWith(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, o Options, tenant string, n NewEndpoint) (Endpoint, string, error) {
	p, err := prepareCreate(keys, o, tenant, n)
	if err != nil {
		return Endpoint{}, "", err
	}
	var row store.EndpointRow
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		row, err = p.insert(ctx, tx)
		return err
	})
	if err != nil {
		return Endpoint{}, "", err
	}
	return endpoint(row), p.secret, nil
}

// creation is a checked registration, ready to insert.
type creation struct {
	row    store.NewEndpoint
	secret string
}

// prepareCreate checks n under o and derives the new endpoint's secret.
func prepareCreate(keys *token.Keyring, o Options, tenant string, n NewEndpoint) (creation, error) {
	if err := o.Validate(); err != nil {
		return creation{}, err
	}
	o = o.withDefaults()
	if err := token.CheckText("tenant", tenant, "url", n.URL); err != nil {
		return creation{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if len(n.URL) > maxURL {
		return creation{}, fmt.Errorf("%w: url: longer than %d bytes", ErrInvalidRequest, maxURL)
	}
	if err := CheckURL(n.URL, o.AllowedHosts); err != nil {
		return creation{}, err
	}
	types := slices.Compact(slices.Sorted(slices.Values(n.EventTypes)))
	if types == nil {
		types = []string{} // all
	}
	for _, t := range types {
		if !slices.Contains(EventTypes, t) {
			return creation{}, fmt.Errorf("%w: event type %q: want one of %s", ErrInvalidRequest, t, strings.Join(EventTypes, ", "))
		}
	}
	id := "whe_" + strings.ToLower(rand.Text())
	nonce := token.NewNonce()
	keyID := keys.CurrentKeyID()
	s, err := secret(keys, keyID, tenant, id, nonce)
	if err != nil {
		return creation{}, err
	}
	return creation{row: store.NewEndpoint{Tenant: tenant, ID: id, URL: n.URL, EventTypes: types,
		Nonce: nonce, KeyID: keyID, Max: o.MaxEndpoints}, secret: s}, nil
}

// insert registers the endpoint in tx.
func (p creation) insert(ctx context.Context, tx pgx.Tx) (store.EndpointRow, error) {
	row, err := store.CreateEndpoint(ctx, tx, p.row)
	if errors.Is(err, store.ErrEndpointLimit) {
		return row, fmt.Errorf("%w: your tenant has the most webhook endpoints this server allows (%d, TOKEND_WEBHOOK_MAX_ENDPOINTS); delete one first", ErrTooManyEndpoints, p.row.Max)
	}
	if err != nil {
		return row, fmt.Errorf("dispatch: create: %w", err)
	}
	return row, nil
}

// maxURL bounds an endpoint's URL.
const maxURL = 2048

// RotateSecret gives an endpoint a new signing secret and answers it, shown
// this once. For overlap (Options.SecretOverlap when 0) deliveries are
// signed under the new secret and the one it replaces, so that receivers
// can move to the new one; the old one is never shown again. Rotating again
// during an overlap ends the earlier overlap.
func RotateSecret(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, tenant, id string, overlap time.Duration) (Endpoint, string, error) {
	if overlap < 0 {
		return Endpoint{}, "", fmt.Errorf("%w: overlap %v is negative", ErrInvalidRequest, overlap)
	}
	overlap = cmp.Or(overlap, DefaultSecretOverlap)
	nonce := token.NewNonce()
	keyID := keys.CurrentKeyID()
	s, err := secret(keys, keyID, tenant, id, nonce)
	if err != nil {
		return Endpoint{}, "", err
	}
	e, err := one(store.RotateEndpoint(ctx, pool, tenant, id, nonce, keyID, overlap.Seconds()))
	if err != nil {
		return Endpoint{}, "", err
	}
	return e, s, nil
}

// List answers tenant's endpoints, oldest first.
func List(ctx context.Context, pool *pgxpool.Pool, tenant string) ([]Endpoint, error) {
	rows, err := store.ListEndpoints(ctx, pool, tenant)
	if err != nil {
		return nil, err
	}
	eps := make([]Endpoint, len(rows))
	for i, r := range rows {
		eps[i] = endpoint(r)
	}
	return eps, nil
}

// Get answers one of tenant's endpoints.
func Get(ctx context.Context, pool *pgxpool.Pool, tenant, id string) (Endpoint, error) {
	return one(store.GetEndpoint(ctx, pool, tenant, id))
}

// SetEnabled enables or disables an endpoint. Disabling parks its pending
// deliveries by the endpoint's flag, writing none of them; enabling clears
// its failure run and resumes them, due now, each with a new maximum age
// (store.SetEndpointEnabled). Its failed deliveries stay failed until
// Redeliver.
func SetEnabled(ctx context.Context, pool *pgxpool.Pool, tenant, id string, enabled bool) (Endpoint, error) {
	return one(store.SetEndpointEnabled(ctx, pool, tenant, id, enabled, "operator"))
}

// Delete removes an endpoint with its deliveries.
func Delete(ctx context.Context, pool *pgxpool.Pool, tenant, id string) (Endpoint, error) {
	return one(store.DeleteEndpoint(ctx, pool, tenant, id))
}

// Redeliver sends again the endpoint's failed deliveries after position
// after, and with all also hurries its pending ones (due now), and answers
// how many. Delivered ones are sent again only when asked: Resend.
func Redeliver(ctx context.Context, pool *pgxpool.Pool, tenant, id string, after int64, all bool) (int64, error) {
	return Resend(ctx, pool, tenant, id, Selection{After: after, All: all})
}

// Selection is which of an endpoint's deliveries Resend sends now.
type Selection struct {
	After     int64 // only those of events after this feed position
	Position  int64 // when not 0, only the delivery of this position
	All       bool  // also the pending and parked ones, hurried: due now
	Delivered bool  // also the delivered ones
}

// Resend sends the endpoint's deliveries selected by sel now, and answers
// how many: failed ones always, pending and parked with All, delivered
// with Delivered; a Position selects one delivery, in any state but
// delivered unless Delivered. On a disabled endpoint they are parked until
// it is enabled.
func Resend(ctx context.Context, pool *pgxpool.Pool, tenant, id string, sel Selection) (int64, error) {
	if sel.After < 0 || sel.Position < 0 {
		return 0, fmt.Errorf("%w: after and position must not be negative", ErrInvalidRequest)
	}
	if _, err := Get(ctx, pool, tenant, id); err != nil {
		return 0, err
	}
	var pos *int64
	if sel.Position != 0 {
		pos = &sel.Position
	}
	return store.Redeliver(ctx, pool, store.RedeliverParams{Tenant: tenant, ID: id, After: sel.After, Position: pos,
		Hurry: sel.All || pos != nil, Delivered: sel.Delivered})
}

// Delivery is one event owed to an endpoint, and its attempts, in the
// shape the API answers and the client reads.
type Delivery = client.WebhookDelivery

// Recent answers the endpoint's latest limit deliveries, newest first.
func Recent(ctx context.Context, pool *pgxpool.Pool, tenant, id string, limit int) ([]Delivery, error) {
	rows, err := store.RecentDeliveries(ctx, pool, tenant, id, limit)
	if err != nil {
		return nil, err
	}
	ds := make([]Delivery, len(rows))
	for i, r := range rows {
		ds[i] = Delivery(r)
	}
	return ds, nil
}

// endpoint is the Endpoint a stored row is.
func endpoint(r store.EndpointRow) Endpoint {
	return Endpoint{Tenant: r.Tenant, ID: r.ID, URL: r.URL, EventTypes: r.EventTypes, Enabled: r.Enabled,
		DisabledReason: r.DisabledReason, FeedPosition: r.FeedPosition, FailingSince: r.FailingSince,
		CreatedAt: r.CreatedAt, PreviousSecretUntil: r.PreviousSecretUntil, nonce: r.Nonce, keyID: r.KeyID}
}

// one is a statement's one endpoint, or ErrNotFound.
func one(r store.EndpointRow, ok bool, err error) (Endpoint, error) {
	switch {
	case err != nil:
		return Endpoint{}, err
	case !ok:
		return Endpoint{}, ErrNotFound
	}
	return endpoint(r), nil
}
