package token

import (
	"bytes"
	"encoding/json"
)

// OutcomeBody is the stored and replayed response body of a finished token,
// whoever finished it: a spend, a lease holder or an operator reconciling.
// Result is set on success and on an atomic handler's declared failure;
// Error on a failure reported by a lease holder or an operator.
type OutcomeBody struct {
	TokenID string `json:"token_id"`
	State   State  `json:"state"`
	Result  any    `json:"result,omitempty"`
	Error   any    `json:"error,omitempty"`
}

// Encode is b as stored and replayed: JSON as json.Marshal writes it, except
// that <, > and & are written as they are, not as six-byte escapes, so a
// body (and the events that carry it) keeps its own size.
func (b OutcomeBody) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
