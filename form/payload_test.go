package form

import (
	"errors"
	"net/url"
	"testing"

	"github.com/tokend/tokend/consume"
)

// TestFieldsJSONRefusesInvalidUTF8: two submits that differ only in bytes
// that are not UTF-8 must not become one payload (U+FFFD for both); the
// submit is refused instead.
func TestFieldsJSONRefusesInvalidUTF8(t *testing.T) {
	for _, fields := range []url.Values{
		{"note": {"\xff"}},
		{"note": {"ok", "\xfe"}},
		{"\xff": {"x"}},
	} {
		b, err := fieldsJSON(fields)
		if !errors.Is(err, consume.ErrInvalidPayload) {
			t.Errorf("fieldsJSON(%q) = %s, %v; want ErrInvalidPayload", fields, b, err)
		}
	}
	b, err := fieldsJSON(url.Values{"note": {"é"}, "tags": {"a", "b"}})
	if err != nil || string(b) != `{"note":"é","tags":["a","b"]}` {
		t.Errorf("fieldsJSON = %s, %v", b, err)
	}
}
