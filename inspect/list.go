package inspect

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// Page sizes of List.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// ErrInvalidFilter: a Filter fails validation.
var ErrInvalidFilter = errors.New("inspect: invalid filter")

// Filter selects the tokens List returns. Zero fields select everything.
type Filter struct {
	State         token.State // as every read reports it (StateExpr): expired includes issued tokens past expiry
	Operation     string
	Subject       string
	Search        string    // tokens whose subject or intent ID is exactly Search; "" for any
	CreatedAfter  time.Time // created at or after; zero for no bound
	CreatedBefore time.Time // created strictly before; zero for no bound
	Limit         int       // page size; zero means DefaultLimit, at most MaxLimit
	Cursor        string    // the next cursor of the previous page; empty for the first
}

// Validate reports the first thing wrong with f, wrapping ErrInvalidFilter.
func (f Filter) Validate() error {
	if err := token.CheckText("operation", f.Operation, "subject", f.Subject, "search", f.Search, "cursor", f.Cursor); err != nil {
		return tokend.InvalidWith(ErrInvalidFilter, "", err)
	}
	if f.State != "" {
		if _, err := token.ParseState(string(f.State)); err != nil {
			return tokend.Invalid(ErrInvalidFilter, "state", fmt.Sprintf("%q is not a state", f.State))
		}
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return tokend.Invalid(ErrInvalidFilter, "limit", fmt.Sprintf("%d: want 1 to %d", f.Limit, MaxLimit))
	}
	if _, err := decodeCursor(f.Cursor); err != nil {
		return err
	}
	return nil
}

// List returns a page of tenant's tokens matching f, newest first, and the
// cursor of the next page, empty on the last one. Pages are keyed on the
// token id, which sorts by creation time, so tokens issued while paging
// neither shift nor repeat the pages after. A token that reads expired has
// its expiry recorded first (see Get); one that a spend in flight moved
// instead leaves a page whose filter excludes its new state, so a page may
// hold fewer than the limit and still have a next one.
func List(ctx context.Context, q db.DBTX, tenant string, f Filter) (items []token.Record, next string, err error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	after, _ := decodeCursor(f.Cursor)
	items, last, err := store.ListTokens(ctx, q, store.ListParams{Tenant: tenant, State: f.State,
		Operation: orNil(f.Operation), Subject: orNil(f.Subject), Search: orNil(f.Search),
		CreatedAfter: timeOrNil(f.CreatedAfter), CreatedBefore: timeOrNil(f.CreatedBefore),
		Before: orNil(after), Limit: limit})
	if err != nil {
		return nil, "", err
	}
	if last != "" {
		next = encodeCursor(last)
	}
	return items, next, nil
}

// Cursors are opaque to callers so that the key they page on can change.
func encodeCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func decodeCursor(c string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !token.ValidID(string(b)) {
		return "", tokend.Invalid(ErrInvalidFilter, "cursor", "is malformed")
	}
	return string(b), nil
}

func orNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
