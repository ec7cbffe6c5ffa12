package form

import (
	"net/url"

	"github.com/go-json-experiment/json"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/token"
)

// fieldsJSON is Config.Payload's default: the fields as a JSON object, a
// string for a field sent once and an array of strings for one sent more than
// once (checkboxes, multiple selects), in RFC 8785 canonical form. A name or
// value that is not valid UTF-8 is refused rather than replaced by U+FFFD,
// which would make two different submits one payload.
func fieldsJSON(fields url.Values) ([]byte, error) {
	obj := make(map[string]any, len(fields))
	for k, v := range fields {
		if len(v) == 1 {
			obj[k] = v[0]
		} else {
			obj[k] = v
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, tokend.Invalid(consume.ErrInvalidPayload, "", "the form's fields are not valid UTF-8")
	}
	return token.Canonical(b, nil)
}
