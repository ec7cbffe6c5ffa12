package reqbody

import (
	"errors"
	"testing"

	"github.com/tokend/tokend/client"
)

// bodies makes a fresh destination for the body of every endpoint that
// takes one.
var bodies = []func() any{
	func() any { return new(Issue) },
	func() any { return new(Consume) },
	func() any { return new(Complete) },
	func() any { return new(Fail) },
	func() any { return new(Unknown) },
	func() any { return new(client.Policy) },
	func() any { return new(Revoke) },
	func() any { return new(Reconcile) },
}

// FuzzDecode feeds any bytes to the decoding of every endpoint's body. It
// must never panic, and every refusal must be an *Error with a detail
// (which internal/serve/httpapi answers 400), never another error, which would
// surface as a 500.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"operation":"ledger.credit","subject":"a","ttl_seconds":60,"payload":{"account":"a","amount":1}}`,
		`{"token":"tks_x","operation":"o","subject":"s","payload":null}`,
		`{"generation":1,"status":200,"result":{"k":[1,2,3]}}`,
		`{"mode":"lease","on_lease_expiry":"takeover","ignored_fields":["trace_id"]}`,
		`{"outcome":"succeeded","status":201,"result":"ok"}`,
		`{"reason":"fraud"}`, `{}`, `[]`, `null`, `{"ttl_seconds":1e400}`, `{"a":1}{"b":2}`, `{"generation":"1"}`,
		"\xff\xfe", `{"subject":"\ud800"}`, `{"reason":"a\u0000b"}`, "{\"reason\":\"a\x00\"}",
		// One reading: duplicates at the top and nested, case variants, numbers
		// a double does not hold, a negative zero, lone surrogates.
		`{"operation":"a","subject":"s","operation":"b"}`,
		`{"operation":"a","payload":{"account":"a","amount":1,"amount":2}}`,
		`{"generation":1,"result":{"a":[{"b":1,"b":2}]}}`,
		`{"Operation":"a","operation":"b"}`, `{"payload":{"amount":5,"Amount":500}}`,
		`{"payload":{"order_id":9007199254740993}}`, `{"payload":[1e400,-1e400,1e-400]}`,
		`{"payload":{"n":-0,"m":-0.0e5}}`, `{"payload":{"s":"\udc00"}}`, "{\"payload\":\"\xed\xa0\x80\"}",
	} {
		for i := range bodies {
			f.Add([]byte(seed), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		err := Decode(body, bodies[int(which)%len(bodies)]())
		if err == nil {
			return
		}
		var refused *Error
		if !errors.As(err, &refused) || refused.Detail == "" {
			t.Fatalf("Decode(%q) = %v: not a refusal with a detail, it would be answered 500", body, err)
		}
	})
}
