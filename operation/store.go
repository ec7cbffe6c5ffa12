package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what this package needs of a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const policyColumns = `name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields, version`

const getSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 AND name = $2`

const listSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 ORDER BY name`

const putSQL = `
INSERT INTO operations (tenant_id, name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant_id, name) DO UPDATE SET
    mode = EXCLUDED.mode,
    on_lease_expiry = EXCLUDED.on_lease_expiry,
    lease_seconds = EXCLUDED.lease_seconds,
    max_ttl_seconds = EXCLUDED.max_ttl_seconds,
    retention_seconds = EXCLUDED.retention_seconds,
    ignored_fields = EXCLUDED.ignored_fields,
    updated_at = now(),
    version = nextval('operation_versions')
RETURNING version`

// Get returns the policy of operation name for tenant: the tenant's own
// declaration, else the built-in default, else an error wrapping ErrUnknown.
func Get(ctx context.Context, q Querier, tenant, name string) (Policy, error) {
	if !nameRE.MatchString(name) {
		// Put refuses such a name, so none is declared; asking Postgres
		// could only fail, and for a name that is not text, loudly.
		return Policy{}, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	p, err := scan(q.QueryRow(ctx, getSQL, tenant, name))
	if errors.Is(err, pgx.ErrNoRows) {
		if b, ok := Builtin(name); ok {
			return b, nil
		}
		return Policy{}, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	if err != nil {
		return Policy{}, fmt.Errorf("operation: get %q: %w", name, err)
	}
	return p, nil
}

// List returns the tenant's declared operations and the built-ins it has not
// overridden, ordered by name.
func List(ctx context.Context, q Querier, tenant string) ([]Policy, error) {
	rows, err := q.Query(ctx, listSQL, tenant)
	if err != nil {
		return nil, fmt.Errorf("operation: list: %w", err)
	}
	declared, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Policy, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("operation: list: %w", err)
	}
	seen := map[string]bool{}
	for _, p := range declared {
		seen[p.Name] = true
	}
	out := declared
	for _, b := range builtins {
		if !seen[b.Name] {
			bp, _ := Builtin(b.Name)
			out = append(out, bp)
		}
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Put declares or redeclares an operation for tenant. Zero fields take their
// defaults. Tokens already issued keep the retention they were issued with.
func Put(ctx context.Context, q Querier, tenant string, p Policy) (Policy, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	err := q.QueryRow(ctx, putSQL, tenant, p.Name, p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.MaxTTLSeconds, p.RetentionSeconds, p.IgnoredFields).Scan(&p.Version)
	if err != nil {
		return Policy{}, fmt.Errorf("operation: put %q: %w", p.Name, err)
	}
	return p, nil
}

func scan(row pgx.Row) (Policy, error) {
	var p Policy
	err := row.Scan(&p.Name, &p.Mode, &p.OnLeaseExpiry, &p.LeaseSeconds, &p.MaxTTLSeconds, &p.RetentionSeconds, &p.IgnoredFields, &p.Version)
	return p, err
}
