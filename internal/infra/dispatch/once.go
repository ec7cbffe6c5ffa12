package dispatch

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// ErrKeyReused: the Idempotency-Key was already used by the tenant for a
// different webhook write.
var ErrKeyReused = errors.New("dispatch: idempotency key reused for a different request")

// KeepRequests is how long the answer of a webhook write sent with an
// Idempotency-Key is kept for its retries.
const KeepRequests = 24 * time.Hour

// maxKeyLen bounds an Idempotency-Key, as for issuing a token.
const maxKeyLen = 255

// Written is the answer of CreateOnce and RotateOnce: the endpoint as the
// write left it and its new secret, shown to this request and to its
// retries. Replayed says the answer is an earlier request's, under the
// same Idempotency-Key: nothing was written this time.
type Written struct {
	Endpoint Endpoint
	Secret   string
	Replayed bool
}

// View is how the API shows w's endpoint, with the secret.
func (w Written) View() client.Webhook {
	v := view(w.Endpoint)
	v.Secret = w.Secret
	return v
}

// CreateOnce is CreateWith under tenant's Idempotency-Key key: the first
// request with key registers the endpoint; one with the same key and the
// same URL and event types, within KeepRequests, gets the same endpoint
// and secret again, Replayed; one with the same key and another request
// gets ErrKeyReused. An empty key is CreateWith.
func CreateOnce(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, o Options, tenant, key string, n NewEndpoint) (Written, error) {
	if key == "" {
		e, s, err := CreateWith(ctx, pool, keys, o, tenant, n)
		return Written{Endpoint: e, Secret: s}, err
	}
	if err := checkKey(key); err != nil {
		return Written{}, err
	}
	p, err := prepareCreate(keys, o, tenant, n)
	if err != nil {
		return Written{}, err
	}
	digest := requestDigest("create", p.row.URL, strings.Join(p.row.EventTypes, ","))
	return once(ctx, pool, keys, tenant, key, digest, p.row.ID, p.row.Nonce, p.row.KeyID, http.StatusCreated, func(tx pgx.Tx) (Endpoint, error) {
		row, err := p.insert(ctx, tx)
		return endpoint(row), err
	})
}

// RotateOnce is RotateSecret under tenant's Idempotency-Key key, as
// CreateOnce is CreateWith: a retry gets the rotation's answer and secret
// again, and does not rotate twice. An empty key is RotateSecret.
func RotateOnce(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, tenant, id, key string, overlap time.Duration) (Written, error) {
	if key == "" {
		e, s, err := RotateSecret(ctx, pool, keys, tenant, id, overlap)
		return Written{Endpoint: e, Secret: s}, err
	}
	if err := checkKey(key); err != nil {
		return Written{}, err
	}
	if overlap < 0 {
		return Written{}, fmt.Errorf("%w: overlap %v is negative", ErrInvalidRequest, overlap)
	}
	overlap = cmp.Or(overlap, DefaultSecretOverlap)
	nonce, keyID := token.NewNonce(), keys.CurrentKeyID()
	digest := requestDigest("rotate-secret", id, strconv.FormatFloat(overlap.Seconds(), 'f', -1, 64))
	return once(ctx, pool, keys, tenant, key, digest, id, nonce, keyID, http.StatusOK, func(tx pgx.Tx) (Endpoint, error) {
		return one(store.RotateEndpoint(ctx, tx, tenant, id, nonce, keyID, overlap.Seconds()))
	})
}

func checkKey(key string) error {
	if err := token.CheckText("Idempotency-Key", key); err != nil || len(key) > maxKeyLen {
		return fmt.Errorf("%w: Idempotency-Key: must be 1 to %d printable characters", ErrInvalidRequest, maxKeyLen)
	}
	return nil
}

// requestDigest is what a key's retries must ask again: the route and its
// parameters, NUL-separated (none of them may hold a NUL).
func requestDigest(parts ...string) []byte {
	d := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return d[:]
}

// once runs write in a transaction holding tenant's key, and records its
// answer there; or answers the earlier request that holds the key.
func once(ctx context.Context, pool *pgxpool.Pool, keys *token.Keyring, tenant, key string, digest []byte, id string, nonce []byte, keyID string,
	status int, write func(pgx.Tx) (Endpoint, error)) (Written, error) {
	var w Written
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		claimed, prior, err := store.ClaimWebhookRequestTx(ctx, tx, tenant, key,
			store.WebhookRequest{Digest: digest, Nonce: nonce, KeyID: keyID, EndpointID: id}, KeepRequests)
		if err != nil {
			return err
		}
		if !claimed {
			w, err = replay(keys, tenant, digest, prior)
			return err
		}
		e, err := write(tx)
		if err != nil {
			return err
		}
		s, err := secret(keys, keyID, tenant, e.ID, nonce)
		if err != nil {
			return err
		}
		answer, err := json.Marshal(view(e))
		if err != nil {
			return fmt.Errorf("dispatch: record the answer: %w", err)
		}
		w = Written{Endpoint: e, Secret: s}
		return store.AnswerWebhookRequestTx(ctx, tx, tenant, key, status, string(answer))
	})
	if err != nil {
		return Written{}, err
	}
	return w, nil
}

// replay is the answer of prior, the request that holds the key, to a
// retry asking digest.
func replay(keys *token.Keyring, tenant string, digest []byte, prior store.WebhookRequest) (Written, error) {
	if !bytes.Equal(prior.Digest, digest) {
		return Written{}, ErrKeyReused
	}
	var v client.Webhook
	if err := json.Unmarshal([]byte(prior.Answer), &v); err != nil {
		return Written{}, fmt.Errorf("dispatch: read the recorded answer: %w", err)
	}
	s, err := secret(keys, prior.KeyID, tenant, prior.EndpointID, prior.Nonce)
	if err != nil {
		return Written{}, err
	}
	e := Endpoint{Tenant: tenant, ID: v.ID, URL: v.URL, EventTypes: v.EventTypes, Enabled: v.Enabled,
		FeedPosition: v.FeedPosition, FailingSince: v.FailingSince, CreatedAt: v.CreatedAt, PreviousSecretUntil: v.PreviousSecretExpiresAt}
	if v.DisabledReason != nil {
		e.DisabledReason = *v.DisabledReason
	}
	return Written{Endpoint: e, Secret: s, Replayed: true}, nil
}
