package operation

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
)

// Get returns the policy of operation name for tenant: the tenant's own
// declaration, else h's built-in default, else an error wrapping ErrUnknown.
// h may be nil.
func Get(ctx context.Context, q db.DBTX, tenant, name string, h Handlers) (Policy, error) {
	if !ValidName(name) {
		// Never declared, and not a value to hand the database (NUL, bad UTF-8).
		return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
	}
	row, ok, err := store.GetPolicy(ctx, q, tenant, name)
	switch {
	case err != nil:
		return Policy{}, err
	case ok:
		return fromRow(row), nil
	}
	if b, ok := builtin(h, name); ok {
		return b, nil
	}
	return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
}

// List returns the tenant's declared operations and h's built-ins it has
// not overridden, ordered by name. h may be nil.
func List(ctx context.Context, q db.DBTX, tenant string, h Handlers) ([]Policy, error) {
	rows, err := store.ListPolicies(ctx, q, tenant)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	out := make([]Policy, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
		seen[r.Name] = true
	}
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
	v, err := store.PutPolicy(ctx, q, tenant, store.PolicyRow{Name: p.Name, Mode: string(p.Mode), OnLeaseExpiry: string(p.OnLeaseExpiry),
		LeaseSeconds: p.LeaseSeconds, MaxTTLSeconds: p.MaxTTLSeconds, RetentionSeconds: p.RetentionSeconds,
		IgnoredFields: p.IgnoredFields, EventOutcome: p.EventOutcome})
	if err != nil {
		return Policy{}, err
	}
	p.Version = v
	return p, nil
}

// fromRow is the Policy a stored declaration holds.
func fromRow(r store.PolicyRow) Policy {
	return Policy{Name: r.Name, Mode: Mode(r.Mode), OnLeaseExpiry: ExpiryPolicy(r.OnLeaseExpiry), LeaseSeconds: r.LeaseSeconds,
		MaxTTLSeconds: r.MaxTTLSeconds, RetentionSeconds: r.RetentionSeconds, IgnoredFields: r.IgnoredFields,
		EventOutcome: r.EventOutcome, Version: r.Version}
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
	var row store.PolicyRow
	err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		var err error
		row, err = store.DeletePolicy(ctx, tx, tenant, name)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNoPolicy):
		return Policy{}, tokend.Refuse(ErrUnknown, "%q", name)
	case errors.Is(err, store.ErrPolicyInUse):
		return Policy{}, tokend.Refuse(ErrInUse, "%s has unfinished tokens (issued, pending or unknown); wait for them to finish or expire, or revoke or reconcile them", name)
	case err != nil:
		return Policy{}, err
	}
	return fromRow(row), nil
}
