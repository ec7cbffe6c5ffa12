package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/store"
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
	return scanStats(q.QueryRow(ctx, store.UnresolvedSQL))
}

// UnresolvedTenant returns the Stats of tenant's tokens, for its operators.
func UnresolvedTenant(ctx context.Context, q db.DBTX, tenant string) (Stats, error) {
	return scanStats(q.QueryRow(ctx, store.UnresolvedTenantSQL, tenant))
}

func scanStats(row pgx.Row) (Stats, error) {
	var s Stats
	var pendingAge, unknownAge int64 // microseconds
	if err := row.Scan(&s.Pending, &s.Unknown, &pendingAge, &unknownAge); err != nil {
		return Stats{}, fmt.Errorf("admin: unresolved: %w", err)
	}
	s.OldestPendingAge = time.Duration(pendingAge) * time.Microsecond
	s.OldestUnknownAge = time.Duration(unknownAge) * time.Microsecond
	return s, nil
}
