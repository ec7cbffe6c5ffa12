package form

import (
	"encoding/json"
	"net/url"

	"github.com/tokend/tokend/token"
)

// fieldsJSON is Config.Payload's default: the fields as a JSON object, a
// string for a field sent once and an array of strings for one sent more than
// once (checkboxes, multiple selects), in RFC 8785 canonical form.
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
		return nil, err
	}
	return token.Canonical(b, nil)
}
