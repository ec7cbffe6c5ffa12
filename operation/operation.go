// Package operation declares the kinds of business action tokens are issued
// for, and each one's policy: how a spend executes, what happens when a lease
// lapses, how long tokens may live and how long their intents are remembered.
package operation

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/token"
)

// Mode is how a spend of an operation executes.
type Mode string

const (
	// Atomic: a registered Go handler runs in the spend's own transaction.
	Atomic Mode = "atomic"
	// Lease: the effect happens elsewhere; the spend grants a lease.
	Lease Mode = "lease"
)

// ExpiryPolicy is what happens when a lease lapses without an outcome.
type ExpiryPolicy string

const (
	// OnExpiryUnknown parks the token as unknown until an operator reconciles
	// it. The default: nothing is re-executed on a guess.
	OnExpiryUnknown ExpiryPolicy = "unknown"
	// OnExpiryTakeover grants the next spender a new generation with the same
	// downstream operation id, so the downstream can deduplicate.
	OnExpiryTakeover ExpiryPolicy = "takeover"
)

// Defaults for the fields of Policy left zero.
const (
	DefaultLeaseSeconds     = 30
	DefaultMaxTTLSeconds    = 3600
	DefaultRetentionSeconds = 86400
)

// Errors returned by this package.
var (
	// ErrUnknown: the operation is neither declared for the tenant nor built in.
	ErrUnknown = errors.New("operation: unknown")
	// ErrInvalid: a policy fails validation.
	ErrInvalid = errors.New("operation: invalid policy")
	// ErrNotRunnable: the policy declares atomic mode, but this server has
	// no Go handler for the operation, so no spend of it could ever run.
	ErrNotRunnable = errors.New("operation: not runnable")
	// ErrBuiltin: the change would take a built-in operation out of the mode
	// its handler runs in, or delete it.
	ErrBuiltin = errors.New("operation: built in")
	// ErrInUse: the operation still has unfinished tokens (issued and not
	// yet expired, pending or unknown), which need its declaration.
	ErrInUse = errors.New("operation: in use")
)

// Handlers is what this package needs of the program's Go handlers:
// which operations it can run in atomic mode, and its built-in operations,
// declared for every tenant with a default policy until the tenant
// declares its own. *consume.Registry is one. A nil Handlers has neither.
type Handlers interface {
	Has(name string) bool
	// Builtin returns the default policy of a built-in operation.
	Builtin(name string) (Policy, bool)
	// Builtins returns the default policies of every built-in operation.
	Builtins() []Policy
}

// builtin is h.Builtin, false for a nil h.
func builtin(h Handlers, name string) (Policy, bool) {
	if h == nil {
		return Policy{}, false
	}
	return h.Builtin(name)
}

// Policy is one operation's declaration.
type Policy struct {
	Name             string
	Mode             Mode
	OnLeaseExpiry    ExpiryPolicy // lease mode only; default OnExpiryUnknown
	LeaseSeconds     int          // default DefaultLeaseSeconds
	MaxTTLSeconds    int          // longest token ttl; default DefaultMaxTTLSeconds
	RetentionSeconds int          // how long past expiry an intent is remembered; default DefaultRetentionSeconds
	IgnoredFields    []string     // payload fields left out of the digest, e.g. "trace_id"
	// EventOutcome puts the stored outcome body in the events (feed and
	// webhooks) of the tokens issued under this declaration. Default off.
	EventOutcome bool
	// Version is set by Put and read back by Get: a number no other
	// declaration has had, 0 for a built-in default. Put ignores it.
	Version int64
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
var fieldRE = regexp.MustCompile(`^[^.\s]+(\.[^.\s]+)*$`)

// ValidName reports whether name can be an operation's: lowercase dotted
// words, at most 100 bytes. No other name is ever declared or built in.
func ValidName(name string) bool { return len(name) <= 100 && nameRE.MatchString(name) }

// WithDefaults returns p with its zero fields set to their defaults. A mode
// left empty is Lease, the mode of an operation without a Go handler; Put
// makes it Atomic when the server has one.
func (p Policy) WithDefaults() Policy {
	if p.Mode == "" {
		p.Mode = Lease
	}
	if p.OnLeaseExpiry == "" {
		p.OnLeaseExpiry = OnExpiryUnknown
	}
	if p.LeaseSeconds == 0 {
		p.LeaseSeconds = DefaultLeaseSeconds
	}
	if p.MaxTTLSeconds == 0 {
		p.MaxTTLSeconds = DefaultMaxTTLSeconds
	}
	if p.RetentionSeconds == 0 {
		p.RetentionSeconds = DefaultRetentionSeconds
	}
	if p.IgnoredFields == nil {
		p.IgnoredFields = []string{}
	}
	return p
}

// Validate reports the first thing wrong with p, wrapping ErrInvalid.
func (p Policy) Validate() error {
	const maxSeconds = 10 * 365 * 86400
	switch {
	case !ValidName(p.Name):
		return tokend.Invalid(ErrInvalid, "name", fmt.Sprintf("%q: want lowercase dotted words like checkout.submit", p.Name))
	case p.Mode != Atomic && p.Mode != Lease:
		return tokend.Invalid(ErrInvalid, "mode", fmt.Sprintf("%q: want atomic or lease", p.Mode))
	case p.OnLeaseExpiry != OnExpiryUnknown && p.OnLeaseExpiry != OnExpiryTakeover:
		return tokend.Invalid(ErrInvalid, "on_lease_expiry", fmt.Sprintf("%q: want unknown or takeover", p.OnLeaseExpiry))
	case p.LeaseSeconds <= 0 || p.LeaseSeconds > maxSeconds:
		return tokend.Invalid(ErrInvalid, "lease_seconds", fmt.Sprintf("%d out of range", p.LeaseSeconds))
	case p.MaxTTLSeconds <= 0 || p.MaxTTLSeconds > maxSeconds:
		return tokend.Invalid(ErrInvalid, "max_ttl_seconds", fmt.Sprintf("%d out of range", p.MaxTTLSeconds))
	case p.RetentionSeconds < 0 || p.RetentionSeconds > maxSeconds:
		return tokend.Invalid(ErrInvalid, "retention_seconds", fmt.Sprintf("%d out of range", p.RetentionSeconds))
	case len(p.IgnoredFields) > 32:
		return tokend.Invalid(ErrInvalid, "ignored_fields", "at most 32")
	}
	for _, f := range p.IgnoredFields {
		if err := token.CheckText("ignored field", f); err != nil {
			return tokend.InvalidWith(ErrInvalid, "", err)
		}
		if len(f) > 200 || !fieldRE.MatchString(f) {
			return tokend.Invalid(ErrInvalid, "ignored_fields", fmt.Sprintf("%q is not a member name or dotted path", f))
		}
	}
	return nil
}
