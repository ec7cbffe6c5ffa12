// Package inspect reads tokens: one token, its audit trail, or a filtered
// page of a tenant's tokens. The one change a read makes is to record an
// expiry that has passed (below). Nothing here can return a
// token's secret: it is not stored.
//
// States are reported as of the database's clock (StateExpr): an issued
// token whose expiry has passed reads as expired, as every spend refuses it,
// before the sweeper records it and after. A read that finds one records
// the expiry, so that no spend in flight can commit after it answered.
package inspect

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// Get returns tenant's token id, or token.ErrNotFound when the tenant has no
// such token (another tenant's token included). An issued token past its
// expiry has its expiry recorded before Get answers (an expire event, actor
// "read"), after waiting for a spend or revoke that holds it: at most
// store's 5 s outside the caller's transaction (token.ErrInProgress when
// that runs out). In a read-only transaction it reads expired unrecorded.
func Get(ctx context.Context, q db.DBTX, tenant, id string) (token.Record, error) {
	if !token.ValidID(id) {
		return token.Record{}, token.ErrNotFound
	}
	return store.GetToken(ctx, q, tenant, id)
}

// Event is one entry of a token's audit trail.
type Event struct {
	Seq        int64           `json:"seq"` // increasing in the order events happened
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"` // an API key id, or the process that acted
	Kind       string          `json:"kind"`  // a token.Action, or "issued"
	From       token.State     `json:"from_state,omitempty"`
	To         token.State     `json:"to_state"`
	Generation int64           `json:"generation"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// Events returns the audit trail of tenant's token id, oldest first, or
// token.ErrNotFound.
func Events(ctx context.Context, q db.DBTX, tenant, id string) ([]Event, error) {
	if !token.ValidID(id) {
		return nil, token.ErrNotFound
	}
	rows, err := store.TokenEvents(ctx, q, tenant, id)
	if err != nil {
		return nil, err
	}
	events := make([]Event, len(rows))
	for i, r := range rows {
		events[i] = Event(r)
	}
	if len(events) == 0 {
		// Every token has its issue event, so no events means no token;
		// asking tells a missing token from a query that raced a purge.
		if _, err := Get(ctx, q, tenant, id); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// Scan reads a row of Columns into a Record.
func Scan(row pgx.Row) (token.Record, error) { return store.ScanRecord(row) }
