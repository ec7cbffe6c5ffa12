package form

import (
	"html/template"
	"time"

	"github.com/tokend/tokend/token"
)

// Field is the hidden input that carries one rendering's token.
type Field struct {
	TokenID   string    // the token's public id, for logs and the operator console
	ExpiresAt time.Time // after this, a submit is refused with ErrStale
	secret    token.Secret
}

// HTML returns the hidden input, for an html/template: {{ .Field.HTML }}
// inside the <form>.
func (f Field) HTML() template.HTML {
	return template.HTML(`<input type="hidden" name="` + FieldName + `" value="` + template.HTMLEscapeString(f.secret.Reveal()) + `">`)
}

// String describes f without its secret, so that a Field that reaches a log
// gives nothing away.
func (f Field) String() string { return "form field of " + f.TokenID }

// GoString is String, for %#v.
func (f Field) GoString() string { return f.String() }

// Value returns the field's value, the token secret, for pages that are not
// built with html/template.
func (f Field) Value() string { return f.secret.Reveal() }
