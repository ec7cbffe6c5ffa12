package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// TestHookAfterMiss, if set, runs between a transition's miss and its lock
// (TransitionTx): tests set it to move the token under the transition.
var TestHookAfterMiss func()

// TransitionTx runs s, a conditional change … WHERE state = from that
// returns the moved token (Columns), and when it matches no row
// tells why: the token is missing or another tenant's (token.ErrNotFound)
// or in another state (token.ErrInvalidState, with the state it is in). A
// operator's transitions (revoke, reconcile) run here; what names them in
// errors is a.
func TransitionTx(ctx context.Context, tx pgx.Tx, tenant, id string, from token.State, a token.Action, s Step, m Moved, args ...any) (token.Record, error) {
	if !token.ValidID(id) {
		return token.Record{}, token.ErrNotFound
	}
	if from == token.Issued {
		// Out of issued, the state hangs on the clock: judge it once the
		// lock is held (lockStateSQL), not by the UPDATE's scan, whose
		// clock is read before it waits for the lock. The UPDATE then
		// runs under the lock, on a token judged unexpired.
		if err := lockState(ctx, tx, tenant, id, from, a); err != nil {
			return token.Record{}, err
		}
	}
	var rec token.Record
	scan := func(row pgx.Row) error {
		var err error
		rec, err = ScanRecord(row)
		return err
	}
	err := s.QueryRow(ctx, tx, scan, m, args...)
	if !errors.Is(err, pgx.ErrNoRows) {
		if err != nil {
			return token.Record{}, fmt.Errorf("admin: %s: %w", a, err)
		}
		return rec, nil
	}
	if TestHookAfterMiss != nil {
		TestHookAfterMiss()
	}
	if err := lockState(ctx, tx, tenant, id, from, a); err != nil {
		return token.Record{}, err
	}
	// The token moved back into from between the UPDATE and the lock (an
	// operator reconciled it, a lease lapsed). Now that the row is locked
	// the UPDATE cannot miss.
	if err := s.QueryRow(ctx, tx, scan, m, args...); err != nil {
		return token.Record{}, fmt.Errorf("admin: %s: %w", a, err)
	}
	return rec, nil
}

// lockState locks tenant's token id (lockStateSQL) and refuses a when the
// token is not in state from.
func lockState(ctx context.Context, tx pgx.Tx, tenant, id string, from token.State, a token.Action) error {
	var state token.State
	err := db.RowError(tx.QueryRow(ctx, lockStateSQL, tenant, id).Scan(&state), token.ErrNotFound, "admin: "+string(a))
	switch {
	case err != nil:
		return err
	case state != from:
		return tokend.Refuse(token.ErrInvalidState, "cannot %s a token that is %s", a.Verb(), state)
	}
	return nil
}

// Unresolved counts the tokens someone owes an outcome for (admin.Stats has
// the same fields): pending and unknown ones, and the age of the oldest of
// each by the database clock.
type Unresolved struct {
	Pending          int64
	Unknown          int64
	OldestPendingAge time.Duration
	OldestUnknownAge time.Duration
}

// CountUnresolved returns the Unresolved of tenant's tokens, or of every
// tenant's when tenant is "".
func CountUnresolved(ctx context.Context, q db.DBTX, tenant string) (Unresolved, error) {
	var row pgx.Row
	if tenant == "" {
		row = q.QueryRow(ctx, unresolvedSQL)
	} else {
		row = q.QueryRow(ctx, unresolvedTenantSQL, tenant)
	}
	var s Unresolved
	var pendingAge, unknownAge int64 // microseconds
	if err := row.Scan(&s.Pending, &s.Unknown, &pendingAge, &unknownAge); err != nil {
		return Unresolved{}, fmt.Errorf("admin: unresolved: %w", err)
	}
	s.OldestPendingAge = time.Duration(pendingAge) * time.Microsecond
	s.OldestUnknownAge = time.Duration(unknownAge) * time.Microsecond
	return s, nil
}
