package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
)

const policyColumns = `name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields, event_outcome, version`

const getSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 AND name = $2`

const listSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 ORDER BY name`

// putSQL declares or redeclares. The update time and the new version are
// computed in VALUES and taken from EXCLUDED: Citus refuses now() and
// nextval in ON CONFLICT DO UPDATE SET, and evaluates them in VALUES on the
// coordinator. A new declaration takes one number of the sequence as its
// column default did; a redeclaration one, as before.
const putSQL = `
INSERT INTO operations (tenant_id, name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields, event_outcome,
                        updated_at, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), nextval('operation_versions'))
ON CONFLICT (tenant_id, name) DO UPDATE SET
    mode = EXCLUDED.mode,
    on_lease_expiry = EXCLUDED.on_lease_expiry,
    lease_seconds = EXCLUDED.lease_seconds,
    max_ttl_seconds = EXCLUDED.max_ttl_seconds,
    retention_seconds = EXCLUDED.retention_seconds,
    ignored_fields = EXCLUDED.ignored_fields,
    event_outcome = EXCLUDED.event_outcome,
    updated_at = EXCLUDED.updated_at,
    version = EXCLUDED.version
RETURNING version`

// lockSQL takes the declaration's row lock, waiting for the issues that hold
// it shared (internal/store PolicyCurrentSQL locks it FOR KEY SHARE) to commit, so
// that the statement after it sees their tokens.
const lockSQL = `SELECT version FROM operations WHERE tenant_id = $1 AND name = $2 FOR UPDATE`

// deleteSQL deletes a declaration unless a token still needs it: issued and
// not yet expired (by the database clock), pending or unknown. Run after
// lockSQL in the same transaction, so no issue can slip in between.
const deleteSQL = `
DELETE FROM operations
WHERE tenant_id = $1 AND name = $2
  AND NOT EXISTS (
    SELECT 1 FROM tokens
    WHERE tenant_id = $1 AND operation = $2
      AND (state IN ('pending', 'unknown') OR (state = 'issued' AND expires_at > now()))
  )
RETURNING ` + policyColumns

// Get returns the policy of operation name for tenant: the tenant's own
// declaration, else h's built-in default, else an error wrapping ErrUnknown.
// h may be nil.
func Get(ctx context.Context, q db.DBTX, tenant, name string, h Handlers) (Policy, error) {
	if !ValidName(name) {
		// Never declared, and not a value to hand the database (NUL, bad UTF-8).
		return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
	}
	p, err := scan(q.QueryRow(ctx, getSQL, tenant, name))
	if db.NoRow(err) {
		if b, ok := builtin(h, name); ok {
			return b, nil
		}
		return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
	}
	if err != nil {
		return Policy{}, fmt.Errorf("operation: get %q: %w", name, err)
	}
	return p, nil
}

// List returns the tenant's declared operations and h's built-ins it has
// not overridden, ordered by name. h may be nil.
func List(ctx context.Context, q db.DBTX, tenant string, h Handlers) ([]Policy, error) {
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
	if h != nil {
		for _, b := range h.Builtins() {
			if !seen[b.Name] {
				out = append(out, b)
			}
		}
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Put declares or redeclares an operation for tenant. Zero fields take their
// defaults; an empty Mode is Atomic when h has a handler for the operation,
// Lease otherwise. Atomic mode without a handler in h is refused with
// ErrNotRunnable, and a built-in operation in another mode than its own with
// ErrBuiltin. A redeclaration governs the tokens issued after it: tokens
// already issued keep the policy they were issued under.
func Put(ctx context.Context, q db.DBTX, tenant string, p Policy, h Handlers) (Policy, error) {
	if p.Mode == "" && h != nil && h.Has(p.Name) {
		p.Mode = Atomic
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	if b, ok := builtin(h, p.Name); ok && p.Mode != b.Mode {
		return Policy{}, tokend.Refuse(ErrBuiltin, "%s runs in %s mode; it cannot be declared %s", p.Name, b.Mode, p.Mode)
	}
	if p.Mode == Atomic && (h == nil || !h.Has(p.Name)) {
		return Policy{}, tokend.Refuse(ErrNotRunnable, "this server has no Go handler for %s; declare it in lease mode", p.Name)
	}
	err := q.QueryRow(ctx, putSQL, tenant, p.Name, p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.MaxTTLSeconds, p.RetentionSeconds, p.IgnoredFields, p.EventOutcome).Scan(&p.Version)
	if err != nil {
		return Policy{}, fmt.Errorf("operation: put %q: %w", p.Name, err)
	}
	return p, nil
}

func scan(row pgx.Row) (Policy, error) {
	var p Policy
	err := row.Scan(&p.Name, &p.Mode, &p.OnLeaseExpiry, &p.LeaseSeconds, &p.MaxTTLSeconds, &p.RetentionSeconds, &p.IgnoredFields, &p.EventOutcome, &p.Version)
	return p, err
}

// Beginner starts a transaction: a pool, a connection, or a transaction
// (which starts a savepoint). It is db.Beginner.
type Beginner = db.Beginner

// Delete removes tenant's declaration of operation name and returns it. It
// is refused with ErrBuiltin for one of h's built-in operations (h may be
// nil), ErrUnknown for one not declared, and ErrInUse while a token of it
// is issued and not yet expired, pending or unknown. Finished tokens keep
// the policy they were issued under, so their outcomes still replay.
func Delete(ctx context.Context, b Beginner, tenant, name string, h Handlers) (Policy, error) {
	if _, ok := builtin(h, name); ok {
		return Policy{}, tokend.Refuse(ErrBuiltin, "%s cannot be deleted", name)
	}
	if !ValidName(name) {
		return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
	}
	var p Policy
	err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		var v int64
		err := tx.QueryRow(ctx, lockSQL, tenant, name).Scan(&v)
		if err := db.RowError(err, tokend.Refuse(ErrUnknown, "%q", name), "operation: delete "+name); err != nil {
			return err
		}
		// A statement of its own, so its snapshot includes the tokens of the
		// issues lockSQL waited for.
		p, err = scan(tx.QueryRow(ctx, deleteSQL, tenant, name))
		inUse := tokend.Refuse(ErrInUse, "%s has unfinished tokens (issued, pending or unknown); wait for them to finish or expire, or revoke or reconcile them", name)
		return db.RowError(err, inUse, "operation: delete "+name)
	})
	return p, err
}
