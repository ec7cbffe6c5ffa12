package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WebhookEventsSchema creates a webhook consumer's dedup table,
// tokend_webhook_events, in the consumer's database (webhook.Schema is
// this): it is not tokend's.
const WebhookEventsSchema = `CREATE TABLE IF NOT EXISTS tokend_webhook_events (
    event_id    text        PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
)`

// webhookOnceSQL records a delivered event id ($1) unless it is recorded.
const webhookOnceSQL = `INSERT INTO tokend_webhook_events (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING`

// WebhookOnce records event id in the consumer's transaction tx
// (webhookOnceSQL) and reports whether this is its first delivery.
func WebhookOnce(ctx context.Context, tx pgx.Tx, eventID string) (first bool, err error) {
	tag, err := tx.Exec(ctx, webhookOnceSQL, eventID)
	if err != nil {
		return false, fmt.Errorf("webhook: record event %s: %w", eventID, err)
	}
	return tag.RowsAffected() == 1, nil
}
