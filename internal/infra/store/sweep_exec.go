package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

// SweepParams are a sweep step's parameters: its batch size and, by the
// step, the actor its events name or the retention (Sweep.Retention).
type SweepParams struct {
	BatchSize        int
	Actor            string
	RetentionSeconds float64
}

// SweepTenants returns the tenants with rows due for step (its Tenants).
func SweepTenants(ctx context.Context, q db.DBTX, step Sweep, p SweepParams) ([]string, error) {
	var args []any
	if step.Retention {
		args = []any{p.RetentionSeconds}
	}
	rows, err := q.Query(ctx, step.Tenants, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SweepBatch runs one batch of step for tenant (its Tenant) and returns the
// rows it moved or deleted.
func SweepBatch(ctx context.Context, q db.DBTX, step Sweep, tenant string, p SweepParams) (int64, error) {
	second := any(p.Actor)
	if step.Retention {
		second = p.RetentionSeconds
	}
	var n int64
	if err := q.QueryRow(ctx, step.Tenant, p.BatchSize, second, tenant).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// TryLock takes the transaction-scoped advisory lock key in tx if it is
// free (tryLockSQL), and reports whether it did.
func TryLock(ctx context.Context, tx pgx.Tx, key int64) (bool, error) {
	var ok bool
	if err := tx.QueryRow(ctx, tryLockSQL, key).Scan(&ok); err != nil {
		return false, fmt.Errorf("take lock: %w", err)
	}
	return ok, nil
}
