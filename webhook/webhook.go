package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/tokend/tokend/internal/infra/store"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Errors of Verify, checkable with errors.Is.
var (
	ErrMissingHeaders   = standardwebhooks.ErrRequiredHeaders
	ErrInvalidSignature = standardwebhooks.ErrNoMatchingSignature
	ErrTooOld           = standardwebhooks.ErrMessageTooOld
	ErrTooNew           = standardwebhooks.ErrMessageTooNew
	// ErrInvalid wraps any other refusal: a malformed secret or header.
	ErrInvalid = errors.New("webhook: invalid")
)

// Verify checks that body and header came from the holder of secret (a
// whsec_ value) within five minutes of now, either way. A delivery that
// fails is not tokend's: answer it with a 4xx and apply nothing.
func Verify(secret string, header http.Header, body []byte) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("%w: secret: %w", ErrInvalid, err)
	}
	if err := wh.Verify(body, header); err != nil {
		switch {
		case errors.Is(err, ErrMissingHeaders), errors.Is(err, ErrInvalidSignature),
			errors.Is(err, ErrTooOld), errors.Is(err, ErrTooNew):
			return err
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// VerifyAny is Verify for a receiver that holds more than one secret, as
// during a rotation's overlap: the delivery is good when it verifies under
// any of them. A failure reports the first secret's error.
func VerifyAny(secrets []string, header http.Header, body []byte) error {
	if len(secrets) == 0 {
		return fmt.Errorf("%w: no secret", ErrInvalid)
	}
	var first error
	for _, s := range secrets {
		err := Verify(s, header, body)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// Sign returns the headers that make body a signed delivery of message id,
// sent at ts, under secret.
func Sign(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	return SignAll([]string{secret}, id, ts, body)
}

// SignAll is Sign under several secrets at once, as tokend signs during a
// rotation's overlap: webhook-signature holds one signature per secret,
// separated by spaces, as Standard Webhooks allows, and a receiver holding
// either secret verifies it.
func SignAll(secrets []string, id string, ts time.Time, body []byte) (http.Header, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret", ErrInvalid)
	}
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, fmt.Errorf("%w: secret: %w", ErrInvalid, err)
		}
		sig, err := wh.Sign(id, ts, body)
		if err != nil {
			return nil, fmt.Errorf("webhook: sign: %w", err)
		}
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, fmt.Sprint(ts.Unix()))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	return h, nil
}

// Delivery is the body of a tokend webhook: one token event.
type Delivery struct {
	// Type is "token." and the event's type, e.g. "token.spend".
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Event     `json:"data"`
}

// Event is a token event, as the feed (GET /v1/events) tells it.
type Event struct {
	ID            string  `json:"id"`
	Position      int64   `json:"position"`
	Type          string  `json:"type"`
	TokenID       string  `json:"token_id"`
	Operation     string  `json:"operation"`
	Subject       string  `json:"subject"`
	Actor         string  `json:"actor"`
	From          *string `json:"from_state"`
	To            string  `json:"to_state"`
	Generation    int64   `json:"generation"`
	OutcomeStatus *int    `json:"outcome_status"`
	// Outcome is the stored outcome body, when the operation opted in.
	Outcome json.RawMessage `json:"outcome"`
	At      time.Time       `json:"at"`
}

// MaxBody bounds what Receive reads of a delivery.
const MaxBody = 1 << 20

// Receive reads, verifies and decodes the delivery r carries.
func Receive(secret string, r *http.Request) (Delivery, error) {
	return ReceiveAny([]string{secret}, r)
}

// ReceiveAny is Receive for a receiver that holds more than one secret, as
// during a rotation's overlap (VerifyAny).
func ReceiveAny(secrets []string, r *http.Request) (Delivery, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return Delivery{}, fmt.Errorf("webhook: read the body: %w", err)
	}
	if len(body) > MaxBody {
		return Delivery{}, fmt.Errorf("%w: body over %d bytes", ErrInvalid, MaxBody)
	}
	if err := VerifyAny(secrets, r.Header, body); err != nil {
		return Delivery{}, err
	}
	var d Delivery
	if err := json.Unmarshal(body, &d); err != nil {
		return Delivery{}, fmt.Errorf("%w: body: %w", ErrInvalid, err)
	}
	if d.Data.ID != r.Header.Get(HeaderID) {
		return Delivery{}, fmt.Errorf("%w: body of event %q under webhook-id %q", ErrInvalid, d.Data.ID, r.Header.Get(HeaderID))
	}
	return d, nil
}

// Schema creates the consumer's dedup table, tokend_webhook_events, if it
// is not there. Run it once, e.g. in the consumer's migrations.
const Schema = store.WebhookEventsSchema

// OnceTx records event id in the consumer's transaction tx and reports
// whether this is its first delivery. Apply the event's effect in the same
// transaction only when first is true: a second delivery of the event, even
// one racing the first, finds the row (or waits for the first to commit)
// and reports false, so the effect happens once.
func OnceTx(ctx context.Context, tx pgx.Tx, eventID string) (first bool, err error) {
	return store.WebhookOnce(ctx, tx, eventID)
}
