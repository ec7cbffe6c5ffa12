package admin

import (
	"context"
	"time"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
)

// Stats counts the tokens someone owes an outcome for: pending ones, whose
// holder has yet to report, and unknown ones, which wait for an operator.
// Nothing expires or purges them, so these numbers are what to alert on.
type Stats struct {
	Pending int64
	Unknown int64
	// The age of the oldest token in each state, measured from its
	// creation by the database clock; zero when there is none.
	OldestPendingAge time.Duration
	OldestUnknownAge time.Duration
}

// Unresolved returns the Stats of all tenants, for metrics.
func Unresolved(ctx context.Context, q db.DBTX) (Stats, error) {
	s, err := store.CountUnresolved(ctx, q, "")
	return Stats(s), err
}

// UnresolvedTenant returns the Stats of tenant's tokens, for its operators.
func UnresolvedTenant(ctx context.Context, q db.DBTX, tenant string) (Stats, error) {
	s, err := store.CountUnresolved(ctx, q, tenant)
	return Stats(s), err
}
