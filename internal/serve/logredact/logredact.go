// Package logredact keeps token secrets (tks_…) and API keys (tkd_…) out of
// logs, whatever a client sends: a secret in a path, a query, a header the
// server does not expect, or an error message that quotes any of them.
//
// Redaction is by shape, not by knowing which values are secrets: every
// "tks_" or "tkd_" (in any case, or with the underscore percent-encoded)
// followed by the characters a secret is written with becomes
// "tks_[REDACTED]". [Handler] applies it to every record a slog.Logger
// writes: the message, every string attribute (in groups too) and every
// other value whose text or JSON would show a secret. tokend serve installs
// it on the process's logger, and httpapi on the logger it is given.
package logredact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
)

// Marker replaces the body of a redacted secret.
const Marker = "[REDACTED]"

// secretRE matches the prefixes of token secrets and API keys and what
// follows them in base64url, percent-encoded or not. It matches more than
// well-formed secrets on purpose: a truncated or mangled one still leaks.
var secretRE = regexp.MustCompile(`(?i)(tk[sd])(?:_|%5f)[A-Za-z0-9_%-]+`)

// Redact returns s with every secret-shaped value replaced by its prefix and
// Marker.
func Redact(s string) string {
	if !mayHold(s) {
		return s
	}
	return secretRE.ReplaceAllString(s, "${1}_"+Marker)
}

// Contains reports whether s holds a secret-shaped value.
func Contains(s string) bool { return mayHold(s) && secretRE.MatchString(s) }

// mayHold is a quick look for "tks" or "tkd" in any case, so that most
// strings skip the regular expression.
func mayHold(s string) bool {
	for i := 0; i+3 < len(s); i++ {
		if s[i]|0x20 == 't' && s[i+1]|0x20 == 'k' && (s[i+2]|0x20 == 's' || s[i+2]|0x20 == 'd') {
			return true
		}
	}
	return false
}

// Handler is a slog.Handler that redacts secrets from every record before
// passing it on.
type Handler struct {
	next slog.Handler
}

// New returns next wrapped in a Handler; a Handler is returned as it is.
func New(next slog.Handler) slog.Handler {
	if h, ok := next.(*Handler); ok {
		return h
	}
	return &Handler{next: next}
}

// Logger returns l with its handler wrapped by New; nil gives slog.Default's.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	if _, ok := l.Handler().(*Handler); ok {
		return l
	}
	return slog.New(New(l.Handler()))
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes on r with its message and attributes redacted. A record with
// nothing that could hold a secret, as every access log line is, goes on as
// it is, without the copy and its allocations (BenchmarkAccessLine).
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if plain(r) {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, Redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs returns a Handler whose records carry attrs, redacted.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = redactAttr(a)
	}
	return &Handler{next: h.next.WithAttrs(red)}
}

// WithGroup returns a Handler that puts later attributes in the group name.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(Redact(name))}
}

// plain reports whether nothing in r needs redacting: no text in it holds
// what a secret starts with, and it has no value redactAttr would have to
// resolve, open or format first.
func plain(r slog.Record) bool {
	if mayHold(r.Message) {
		return false
	}
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		switch a.Value.Kind() {
		case slog.KindString:
			ok = !mayHold(a.Key) && !mayHold(a.Value.String())
		case slog.KindGroup, slog.KindAny, slog.KindLogValuer:
			ok = false
		default:
			ok = !mayHold(a.Key)
		}
		return ok
	})
	return ok
}

func redactAttr(a slog.Attr) slog.Attr {
	a.Key = Redact(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Redact(v.String()))
	case slog.KindGroup:
		group := v.Group()
		red := make([]slog.Attr, len(group))
		for i, g := range group {
			red[i] = redactAttr(g)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		a.Value = redactAny(v)
	default:
		a.Value = v
	}
	return a
}

// redactAny replaces a value whose rendering would show a secret by its
// redacted text. Handlers render an error by its message, bytes as text or
// base64, and anything else with fmt or encoding/json; all are checked. A value without a secret
// is left as it is, so that handlers keep rendering it their own way.
func redactAny(v slog.Value) slog.Value {
	x := v.Any()
	var texts []string
	switch x := x.(type) {
	case error:
		texts = append(texts, x.Error())
	case []byte: // JSON handlers write it in base64, which hides nothing
		texts = append(texts, string(x))
	}
	texts = append(texts, fmt.Sprintf("%+v", x))
	if b, err := json.Marshal(x); err == nil {
		texts = append(texts, string(b))
	}
	for _, t := range texts {
		if Contains(t) {
			return slog.StringValue(Redact(t))
		}
	}
	return v
}
