package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/client"
)

// requestBodies makes a fresh destination for the body of every endpoint
// that takes one.
var requestBodies = []func() any{
	func() any { return new(issueRequest) },
	func() any { return new(consumeRequest) },
	func() any { return new(completeRequest) },
	func() any { return new(failRequest) },
	func() any { return new(unknownRequest) },
	func() any { return new(client.Policy) },
	func() any { return new(revokeRequest) },
	func() any { return new(reconcileRequest) },
}

// FuzzDecode feeds any bytes to the decoding of every endpoint's body. It
// must never panic, and every refusal must be a 400 problem (or the size
// limit's 413), never an error that would surface as a 500.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"operation":"ledger.credit","subject":"a","ttl_seconds":60,"payload":{"account":"a","amount":1}}`,
		`{"token":"tks_x","operation":"o","subject":"s","payload":null}`,
		`{"generation":1,"status":200,"result":{"k":[1,2,3]}}`,
		`{"mode":"lease","on_lease_expiry":"takeover","ignored_fields":["trace_id"]}`,
		`{"outcome":"succeeded","status":201,"result":"ok"}`,
		`{"reason":"fraud"}`, `{}`, `[]`, `null`, `{"ttl_seconds":1e400}`, `{"a":1}{"b":2}`, `{"generation":"1"}`,
		"\xff\xfe", `{"subject":"\ud800"}`,
		// One reading: duplicates at the top and nested, case variants, numbers
		// a double does not hold, a negative zero, lone surrogates.
		`{"operation":"a","subject":"s","operation":"b"}`,
		`{"operation":"a","payload":{"account":"a","amount":1,"amount":2}}`,
		`{"generation":1,"result":{"a":[{"b":1,"b":2}]}}`,
		`{"Operation":"a","operation":"b"}`, `{"payload":{"amount":5,"Amount":500}}`,
		`{"payload":{"order_id":9007199254740993}}`, `{"payload":[1e400,-1e400,1e-400]}`,
		`{"payload":{"n":-0,"m":-0.0e5}}`, `{"payload":{"s":"\udc00"}}`, "{\"payload\":\"\xed\xa0\x80\"}",
	} {
		for i := range requestBodies {
			f.Add([]byte(seed), uint8(i))
		}
	}
	gin.SetMode(gin.ReleaseMode)
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		dst := requestBodies[int(which)%len(requestBodies)]()
		rec := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(rec)
		c.Request = httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		c.Request.Body = http.MaxBytesReader(rec, c.Request.Body, 1<<10)
		err := Decode(c, dst)
		if err == nil {
			return
		}
		var p *Problem
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			if len(body) <= 1<<10 {
				t.Fatalf("%d bytes refused as too large", len(body))
			}
		case errors.As(err, &p):
			if p.Status != http.StatusBadRequest || p.Code != "invalid_request" || p.Detail == "" {
				t.Fatalf("refusal %+v, want a 400 invalid_request with a detail", p)
			}
		default:
			t.Fatalf("Decode(%q) = %v: not a problem, it would be answered 500", body, err)
		}
	})
}
