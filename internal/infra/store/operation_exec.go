package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

// Errors of DeletePolicy.
var (
	// ErrNoPolicy: the tenant has not declared the operation.
	ErrNoPolicy = errors.New("store: operation not declared")
	// ErrPolicyInUse: a token still needs the declaration.
	ErrPolicyInUse = errors.New("store: operation has unfinished tokens")
)

// PolicyRow is a tenant's declaration of an operation as the operations
// table holds it; operation.Policy is what it means.
type PolicyRow struct {
	Name             string
	Mode             string
	OnLeaseExpiry    string
	LeaseSeconds     int
	MaxTTLSeconds    int
	RetentionSeconds int
	IgnoredFields    []string
	EventOutcome     bool
	Version          int64
}

func scanPolicy(row pgx.Row) (PolicyRow, error) {
	var p PolicyRow
	err := row.Scan(&p.Name, &p.Mode, &p.OnLeaseExpiry, &p.LeaseSeconds, &p.MaxTTLSeconds, &p.RetentionSeconds, &p.IgnoredFields, &p.EventOutcome, &p.Version)
	return p, err
}

// GetPolicy reads tenant's declaration of operation name (policyGetSQL); ok
// is false when there is none.
func GetPolicy(ctx context.Context, q db.DBTX, tenant, name string) (p PolicyRow, ok bool, err error) {
	p, err = scanPolicy(q.QueryRow(ctx, policyGetSQL, tenant, name))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return PolicyRow{}, false, nil
	case err != nil:
		return PolicyRow{}, false, fmt.Errorf("operation: get %q: %w", name, err)
	}
	return p, true, nil
}

// ListPolicies reads tenant's declarations, ordered by name (policyListSQL).
func ListPolicies(ctx context.Context, q db.DBTX, tenant string) ([]PolicyRow, error) {
	rows, err := q.Query(ctx, policyListSQL, tenant)
	if err != nil {
		return nil, fmt.Errorf("operation: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PolicyRow, error) { return scanPolicy(r) })
	if err != nil {
		return nil, fmt.Errorf("operation: list: %w", err)
	}
	return out, nil
}

// PutPolicy declares or redeclares p for tenant (policyPutSQL), ignoring
// p.Version, and returns the declaration's new version.
func PutPolicy(ctx context.Context, q db.DBTX, tenant string, p PolicyRow) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, policyPutSQL, tenant, p.Name, p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.MaxTTLSeconds,
		p.RetentionSeconds, p.IgnoredFields, p.EventOutcome).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("operation: put %q: %w", p.Name, err)
	}
	return v, nil
}

// DeletePolicy deletes tenant's declaration of operation name in tx and
// returns it: it locks the declaration (policyLockSQL), waiting for the
// issues that hold it, then deletes it (policyDeleteSQL). ErrNoPolicy when
// there is none, ErrPolicyInUse while a token still needs it.
func DeletePolicy(ctx context.Context, tx pgx.Tx, tenant, name string) (PolicyRow, error) {
	var v int64
	err := tx.QueryRow(ctx, policyLockSQL, tenant, name).Scan(&v)
	if err := db.RowError(err, ErrNoPolicy, "operation: delete "+name); err != nil {
		return PolicyRow{}, err
	}
	// A statement of its own, so its snapshot includes the tokens of the
	// issues policyLockSQL waited for.
	p, err := scanPolicy(tx.QueryRow(ctx, policyDeleteSQL, tenant, name))
	if err := db.RowError(err, ErrPolicyInUse, "operation: delete "+name); err != nil {
		return PolicyRow{}, err
	}
	return p, nil
}
