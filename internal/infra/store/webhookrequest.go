package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of idempotent webhook admin writes (webhook_requests): a
// create or rotate-secret sent with an Idempotency-Key is written once,
// and its answer is kept, without the secret, for the key's retries.

// webhookRequestClaimSQL claims tenant $1's key $2 for a write, unless an
// earlier request holds it. A concurrent claim of the same key waits here
// until the first one's transaction ends.
const webhookRequestClaimSQL = `
INSERT INTO webhook_requests (tenant_id, idempotency_key, request_digest, secret_nonce, secret_key_id, endpoint_id)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`

// webhookRequestGetSQL reads the request that holds tenant $1's key $2.
const webhookRequestGetSQL = `
SELECT request_digest, status, answer, secret_nonce, secret_key_id, endpoint_id
FROM webhook_requests WHERE tenant_id = $1 AND idempotency_key = $2`

// webhookRequestAnswerSQL records the answer $3 (status) $4 (body without
// its secret) of the request holding tenant $1's key $2.
const webhookRequestAnswerSQL = `
UPDATE webhook_requests SET status = $3, answer = $4 WHERE tenant_id = $1 AND idempotency_key = $2`

// webhookRequestForgetSQL forgets tenant $1's keys older than $2 seconds.
const webhookRequestForgetSQL = `
DELETE FROM webhook_requests WHERE tenant_id = $1 AND created_at < (SELECT now() - make_interval(secs => $2))`

// WebhookRequest is a webhook admin write held by an Idempotency-Key: the
// digest of what was asked, its answer (Status 0 until it has one) and the
// nonce and key the answer's secret derives from.
type WebhookRequest struct {
	Digest     []byte
	Status     int
	Answer     string
	Nonce      []byte
	KeyID      string
	EndpointID string
}

// ClaimWebhookRequestTx claims tenant's key for r in tx, first forgetting
// the tenant's keys older than keep. claimed is false when an earlier
// request holds the key; prior is that request.
func ClaimWebhookRequestTx(ctx context.Context, tx pgx.Tx, tenant, key string, r WebhookRequest, keep time.Duration) (claimed bool, prior WebhookRequest, err error) {
	if _, err := tx.Exec(ctx, webhookRequestForgetSQL, tenant, keep.Seconds()); err != nil {
		return false, prior, fmt.Errorf("webhook request: forget: %w", err)
	}
	tag, err := tx.Exec(ctx, webhookRequestClaimSQL, tenant, key, r.Digest, r.Nonce, r.KeyID, r.EndpointID)
	if err != nil {
		return false, prior, fmt.Errorf("webhook request: claim: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return true, prior, nil
	}
	err = tx.QueryRow(ctx, webhookRequestGetSQL, tenant, key).Scan(&prior.Digest, &prior.Status, &prior.Answer, &prior.Nonce, &prior.KeyID, &prior.EndpointID)
	if errors.Is(err, pgx.ErrNoRows) {
		// Forgotten between the two statements: rare, and the retry
		// claims it.
		return false, prior, fmt.Errorf("webhook request: key forgotten while read: %w", err)
	}
	if err != nil {
		return false, prior, fmt.Errorf("webhook request: read: %w", err)
	}
	return false, prior, nil
}

// AnswerWebhookRequestTx records, in tx, the answer of the request holding
// tenant's key.
func AnswerWebhookRequestTx(ctx context.Context, tx pgx.Tx, tenant, key string, status int, answer string) error {
	if _, err := tx.Exec(ctx, webhookRequestAnswerSQL, tenant, key, status, answer); err != nil {
		return fmt.Errorf("webhook request: answer: %w", err)
	}
	return nil
}
