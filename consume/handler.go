package consume

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/operation"
)

// ErrInvalidPayload is returned (wrapped) by a handler that rejects its input
// before doing anything. The spend is abandoned and the token stays spendable.
var ErrInvalidPayload = errors.New("consume: invalid payload")

// PayloadError is a payload refused for one field and rule, in the words of
// the API rather than of Go: Field "amount", Rule "must be an integer from
// 1 to 1000000000000". Field is a dotted path into the payload, empty for the
// payload as a whole. It matches ErrInvalidPayload.
type PayloadError struct {
	Field string
	Rule  string
}

func (e *PayloadError) Error() string {
	return fmt.Sprintf("%s: %s", ErrInvalidPayload, e.Detail())
}

// Detail says what is wrong as the API answers it, the field named from the
// request body's root: "payload.amount must be ...".
func (e *PayloadError) Detail() string {
	if e.Field == "" {
		return "payload " + e.Rule
	}
	return "payload." + e.Field + " " + e.Rule
}

// Is makes errors.Is(err, ErrInvalidPayload) true.
func (e *PayloadError) Is(target error) bool { return target == ErrInvalidPayload }

// As reads e as a *tokend.InvalidInputError, the one invalid-input error
// of tokend: Field named from the request body's root ("payload.amount"),
// Reason e's Rule.
func (e *PayloadError) As(target any) bool {
	t, ok := target.(**tokend.InvalidInputError)
	if ok {
		field := "payload"
		if e.Field != "" {
			field += "." + e.Field
		}
		*t = &tokend.InvalidInputError{Kind: ErrInvalidPayload, Field: field, Reason: e.Rule}
	}
	return ok
}

// Call is what a handler is asked to do.
type Call struct {
	Tenant    string
	TokenID   string // unique per spend: a natural key for the business row
	Operation string
	Subject   string
	Payload   []byte // the JSON the spender presented
}

// Outcome is a handler's answer. A 2xx Status consumes the token; a 4xx or
// 5xx is a final business failure (insufficient funds, say): the token moves
// to failed and the outcome is replayed like a success. Any other status, or
// one that cannot carry a body (204, 205), cannot be replayed byte for byte,
// so the spend fails with an error and stores nothing (token.CheckOutcomeStatus).
type Outcome struct {
	Status int
	Result any // marshalled to JSON once, then stored and replayed byte for byte
}

// Succeeded reports whether o consumes the token.
func (o Outcome) Succeeded() bool { return o.Status >= 200 && o.Status < 300 }

// Handler performs an atomic operation's business effect on the spend's
// transaction. It must not commit or roll back tx, nor call out to other
// systems whose effects would not roll back with it (use lease mode for those).
// An error wrapping ErrInvalidPayload abandons the spend; any other error
// aborts it, and Spend rolls back.
type Handler interface {
	Execute(ctx context.Context, tx pgx.Tx, c Call) (Outcome, error)
}

// Validator is implemented by a Handler that can tell from a payload alone
// that Execute would refuse it. The issuer asks it before issuing a token
// bound to a payload, so a token that could never be spent is never issued.
// Validate returns nil or an error matching ErrInvalidPayload, preferably a
// *PayloadError; it must not depend on anything but payload.
type Validator interface {
	Validate(payload []byte) error
}

// HandlerFunc adapts a function to Handler, for RegisterBuiltin and
// Register; RegisterFunc's typed function is the usual way.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, c Call) (Outcome, error)

// Execute calls f.
func (f HandlerFunc) Execute(ctx context.Context, tx pgx.Tx, c Call) (Outcome, error) {
	return f(ctx, tx, c)
}

// Registry maps operation names to handlers, and holds the program's
// built-in operations. It is safe for concurrent use, and it is the
// operation.Handlers of operation's Put, Get, List and Delete.
type Registry struct {
	mu       sync.RWMutex
	m        map[string]Handler
	builtins map[string]operation.Policy
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{m: map[string]Handler{}, builtins: map[string]operation.Policy{}}
}

// Register makes h the handler of operation, replacing any earlier one.
// Tenants declare the operation (operation.Put) before issuing its tokens.
//
// Register is the lower level: RegisterFunc is the way to add an operation,
// declaring it and typing its payload in one call. Register is for a
// handler whose operation each tenant declares with a policy of its own.
func (r *Registry) Register(operation string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[operation] = h
	delete(r.builtins, operation)
}

// RegisterBuiltin is the lower level of RegisterFunc, for a Handler that
// reads its payload itself: it makes h the handler of p.Name and declares it for every
// tenant in atomic mode with policy p (zero fields take their defaults),
// until a tenant declares its own; a tenant cannot take it out of atomic
// mode or delete it. It panics on a policy that fails validation or names
// another mode: built-ins are fixed when the program is written.
func (r *Registry) RegisterBuiltin(p operation.Policy, h Handler) {
	p.Mode = cmp.Or(p.Mode, operation.Atomic)
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		panic(fmt.Sprintf("consume: RegisterBuiltin: %v", err))
	}
	if p.Mode != operation.Atomic {
		panic(fmt.Sprintf("consume: RegisterBuiltin: %s: a built-in runs in atomic mode, not %s", p.Name, p.Mode))
	}
	p.IgnoredFields = slices.Clone(p.IgnoredFields)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[p.Name] = h
	r.builtins[p.Name] = p
}

// Builtin returns the default policy of a built-in operation.
func (r *Registry) Builtin(name string) (operation.Policy, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.builtins[name]
	p.IgnoredFields = slices.Clone(p.IgnoredFields)
	return p, ok
}

// Builtins returns the default policies of the built-in operations, by name.
func (r *Registry) Builtins() []operation.Policy {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]operation.Policy, 0, len(r.builtins))
	for _, name := range slices.Sorted(maps.Keys(r.builtins)) {
		p := r.builtins[name]
		p.IgnoredFields = slices.Clone(p.IgnoredFields)
		out = append(out, p)
	}
	return out
}

// Has reports whether operation has a handler, and so can be declared atomic.
func (r *Registry) Has(operation string) bool {
	_, ok := r.Lookup(operation)
	return ok
}

// Validate checks payload with operation's handler, if it has one that is a
// Validator; it returns nil otherwise.
func (r *Registry) Validate(operation string, payload []byte) error {
	h, ok := r.Lookup(operation)
	if !ok {
		return nil
	}
	if v, ok := h.(Validator); ok {
		return v.Validate(payload)
	}
	return nil
}

// ValidateChecked is Validate for a payload that token.Digest (or
// jsonread.CheckPayload) has just accepted: a handler made by Func reads it
// without checking it a second time. Validate is the call for any other
// payload.
func (r *Registry) ValidateChecked(operation string, payload []byte) error {
	if h, ok := r.Lookup(operation); ok {
		if c, ok := h.(checkedHandler); ok {
			return c.validateChecked(payload)
		}
	}
	return r.Validate(operation, payload)
}

// Lookup returns the handler of operation.
func (r *Registry) Lookup(operation string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.m[operation]
	return h, ok
}
