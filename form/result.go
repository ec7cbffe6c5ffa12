package form

import (
	"encoding/json"
	"fmt"

	"github.com/tokend/tokend/token"
)

// Result is the outcome of a submitted form: the first submit's, stored, and
// the same for every later submit of the same rendering.
type Result struct {
	TokenID  string
	State    token.State // token.Consumed, or token.Failed for a declared business failure
	Status   int         // the HTTP status of the outcome
	Body     []byte      // the stored outcome, {"token_id", "state", "result"}, byte for byte
	Replayed bool        // an earlier submit of this rendering produced it
}

// Decode unmarshals the outcome's result into v: the "result" member of Body,
// or its "error" member when it has no result.
func (r Result) Decode(v any) error {
	var body struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return fmt.Errorf("form: decode outcome: %w", err)
	}
	raw := body.Result
	if raw == nil {
		raw = body.Error
	}
	if raw == nil {
		return fmt.Errorf("form: outcome of %s has no result", r.TokenID)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("form: decode outcome: %w", err)
	}
	return nil
}
