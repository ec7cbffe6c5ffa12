package ledger

import (
	"bytes"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
)

// accountRE is the account names' first definition.
var accountRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,64}$`)

// FuzzParsePayloadReadsAsByMap checks the ledger's reading of a payload,
// member by member, against its first one (encoding/json into a map, the
// members then read in name order): the same Payload, or the same refusal
// naming the same field and rule; and ValidAccount against the pattern it
// replaced.
func FuzzParsePayloadReadsAsByMap(f *testing.F) {
	for _, seed := range []string{
		`{"account":"acct-1","amount":1}`, `{"amount":1,"account":"a","trace_id":"t"}`,
		`{"account":"a","amount":1,"trace_id":null}`, `{"account":null,"amount":1}`,
		`{"account":"a b","amount":0,"zz":1}`, `{"b":1,"a":2}`, `{"amount":1}`, `{"account":"a"}`,
		`{"account":"\u0061","amount":1e3}`, `{"account":"a","amount":"1"}`, `[]`, `null`, `"x"`, `{}`,
		`{"trace_id":5,"account":"a","amount":1}`, `{"account":"a","amount":-0}`,
	} {
		f.Add([]byte(seed))
	}
	for _, seed := range []string{"a", "", "A-z_0.9:@", "a b", "é", strings.Repeat("a", 64), strings.Repeat("a", 65), "a\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ValidAccount(string(b)) != accountRE.MatchString(string(b)) {
			t.Fatalf("ValidAccount(%q) = %v; the pattern says otherwise", b, !accountRE.MatchString(string(b)))
		}
		if consume.CheckPayload(b) != nil {
			return
		}
		got, gotErr := parseChecked(b)
		want, wantErr := parseCheckedByMap(b)
		if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("parseChecked(%s) = %+v, %v; by map %+v, %v", b, got, gotErr, want, wantErr)
		}
	})
}

// parseCheckedByMap is the ledger's first reading of a checked payload.
func parseCheckedByMap(b []byte) (Payload, error) {
	fields, err := decodeObjectByMap(b)
	if err != nil {
		return Payload{}, err
	}
	// The one reading the payload digest also has (consume.CheckPayload):
	// "Amount" is not "amount", and a member given twice is refused.
	var p Payload
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[name]
		switch name {
		case "account":
			if json.Unmarshal(raw, &p.Account) != nil || !ValidAccount(p.Account) {
				return Payload{}, &consume.PayloadError{Field: "account", Rule: ruleAccount}
			}
		case "amount":
			// An integer in JSON's own notation: no fraction, no exponent.
			n, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil || n <= 0 || n > MaxAmount {
				return Payload{}, &consume.PayloadError{Field: "amount", Rule: ruleAmount}
			}
			p.Amount = n
		case "trace_id":
			if json.Unmarshal(raw, &p.TraceID) != nil {
				return Payload{}, &consume.PayloadError{Field: "trace_id", Rule: "must be a string"}
			}
		default:
			return Payload{}, &consume.PayloadError{Field: name, Rule: "is not a field of this operation (account, amount, trace_id)"}
		}
	}
	switch {
	case fields["account"] == nil:
		return Payload{}, &consume.PayloadError{Field: "account", Rule: "is required; it " + ruleAccount}
	case fields["amount"] == nil:
		return Payload{}, &consume.PayloadError{Field: "amount", Rule: "is required; it " + ruleAmount}
	}
	return p, nil
}

// decodeObjectByMap splits a JSON object, one consume.CheckPayload
// accepted, into its members, each left raw.
func decodeObjectByMap(b []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return nil, &consume.PayloadError{Rule: "must be a JSON object {account, amount}"}
	}
	return fields, nil
}
