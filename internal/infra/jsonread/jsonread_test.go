package jsonread

import (
	"errors"
	"strings"
	"testing"
)

type credit struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
	Meta    *struct {
		Trace string `json:"trace"`
	} `json:"meta"`
}

// TestUnmarshal: one reading of a document decoded into a Go value, the way
// ledger.credit reads its payload. Every refusal is an *Error naming the
// member at fault.
func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   credit
		reason string // a part of the refusal; "" when accepted
	}{
		{"plain", `{"account":"a","amount":5}`, credit{Account: "a", Amount: 5}, ""},
		{"duplicate at the top", `{"account":"a","amount":5,"amount":500}`, credit{}, `duplicate member "amount"`},
		{"duplicate nested", `{"account":"a","amount":5,"meta":{"trace":"x","trace":"y"}}`, credit{}, `duplicate member "trace" in "meta"`},
		{"case variant", `{"account":"a","amount":5,"Amount":500}`, credit{}, `unknown field "Amount"`},
		{"case variant alone", `{"account":"a","AMOUNT":500}`, credit{}, `unknown field "AMOUNT"`},
		{"unknown nested", `{"account":"a","amount":5,"meta":{"Trace":"x"}}`, credit{}, `unknown field "Trace" in "meta"`},
		{"big int into int64 stays exact", `{"account":"a","amount":9007199254740993}`, credit{Account: "a", Amount: 9007199254740993}, ""},
		{"1e400", `{"account":"a","amount":1e400}`, credit{}, `field "amount" must be an integer`},
		{"fraction", `{"account":"a","amount":5.5}`, credit{}, `field "amount" must be an integer`},
		{"wrong type", `{"account":5}`, credit{}, `field "account" must be a string, not a number`},
		{"lone surrogate", `{"account":"\ud800"}`, credit{}, `in "account"`},
		{"invalid UTF-8", "{\"account\":\"\xff\"}", credit{}, "invalid UTF-8"},
		{"trailing data", `{"account":"a"} {}`, credit{}, "after the JSON value"},
		{"ends early", `{"account":`, credit{}, "ends early"},
		{"empty", ``, credit{}, "ends early"},
		{"array", `[]`, credit{}, "must be an object, not an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got credit
			err := Unmarshal([]byte(tt.in), &got)
			if tt.reason == "" {
				if err != nil || got.Account != tt.want.Account || got.Amount != tt.want.Amount {
					t.Fatalf("Unmarshal(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("Unmarshal(%s) = %v (%T), want an *Error saying %q", tt.in, err, err, tt.reason)
			}
		})
	}
}

// TestCheckPayload: a payload a digest binds must read one way, numbers
// included. Refused: what parsers disagree on (duplicates, case variants
// are distinct members and so accepted, invalid UTF-8, lone surrogates) and
// numbers whose double is not the number sent.
func TestCheckPayload(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		reason string // a part of the refusal; "" when accepted
	}{
		{"object", `{"account":"a","amount":5}`, ""},
		{"case variants are two members", `{"amount":5,"Amount":6}`, ""},
		{"duplicate at the top", `{"amount":5,"amount":6}`, `duplicate member "amount"`},
		{"duplicate nested", `{"a":[{"b":{"c":1,"c":1}}]}`, `duplicate member "c" in "a.0.b"`},
		{"duplicate same value", `{"a":1,"a":1}`, `duplicate member "a"`},
		{"2^53", `{"id":9007199254740992}`, ""},
		{"2^53+1", `{"id":9007199254740993}`, `the number 9007199254740993 in "id" is not exactly`},
		{"-(2^53+1)", `[-9007199254740993]`, `is not exactly`},
		{"2^63", `9223372036854775808`, `is not exactly`},
		{"big power of ten", `{"n":1e22}`, ""},
		{"big power of ten spelled out", `{"n":10000000000000000000000}`, ""},
		// 1e23's double is 99999999999999991611392, which RFC 8785 writes
		// 1e+23: the literal 1e23 is what the digest binds, the double's
		// exact digits are not.
		{"1e23", `{"n":1e23}`, ""},
		{"1e23's double spelled out", `{"n":99999999999999991611392}`, `is not exactly`},
		{"1e400", `{"n":1e400}`, "out of the range"},
		{"-1e400", `{"n":-1e400}`, "out of the range"},
		{"1e-400", `{"n":1e-400}`, "is not exactly"},
		{"0.1", `{"n":0.1}`, ""},
		{"12.50", `{"n":12.50}`, ""},
		{"1.0", `{"n":1.0}`, ""},
		{"1E2", `{"n":1E+2}`, ""},
		{"0.1 with noise", `{"n":0.10000000000000000001}`, "is not exactly"},
		{"-0", `{"n":-0}`, ""},
		{"-0.0e5", `{"n":-0.0e5}`, ""},
		{"0e999999999999", `{"n":0e999999999999}`, ""},
		{"tiny double", `{"n":5e-324}`, ""},
		{"max double", `{"n":1.7976931348623157e308}`, ""},
		{"lone high surrogate", `{"s":"\ud800"}`, `in "s"`},
		{"lone low surrogate", `{"s":"\udc00x"}`, `in "s"`},
		{"surrogate pair", `{"s":"\ud83d\ude00"}`, ""},
		{"invalid UTF-8", "{\"s\":\"\xff\xfe\"}", "invalid UTF-8"},
		{"invalid UTF-8 in a name", "{\"\xff\":1}", "invalid UTF-8"},
		{"trailing data", `{} {}`, "after the JSON value"},
		{"empty", ` `, "ends early"},
		{"scalar", `"x"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPayload([]byte(tt.in))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("CheckPayload(%s) = %v, want nil", tt.in, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("CheckPayload(%s) = %v, want an *Error saying %q", tt.in, err, tt.reason)
			}
		})
	}
}

// TestCheckLeavesNumbers: Check, for documents no digest binds (a stored
// result), refuses what reads two ways but keeps numbers as they are.
func TestCheckLeavesNumbers(t *testing.T) {
	if err := Check([]byte(`{"order_id":9007199254740993}`)); err != nil {
		t.Errorf("Check refused a big integer: %v", err)
	}
	if err := Check([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Error("Check accepted a duplicate member")
	}
}

// FuzzCheckPayload: every refusal is an *Error, and whatever CheckPayload
// accepts Unmarshal reads too.
func FuzzCheckPayload(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `9007199254740993`, `1e400`, `-0`, `"\ud800"`, "\"\xff\"", `{"A":1,"a":2}`, `0.10000000000000000001`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := CheckPayload(b)
		var e *Error
		if err != nil {
			if !errors.As(err, &e) || err.Error() == "" {
				t.Fatalf("CheckPayload(%q) = %v (%T), want an *Error", b, err, err)
			}
			return
		}
		var v any
		if err := Unmarshal(b, &v); err != nil {
			t.Fatalf("CheckPayload accepted %q but Unmarshal refuses it: %v", b, err)
		}
	})
}

// FuzzCheckPayloadRead: on a value a strict decoder accepts (Check),
// CheckPayloadRead refuses exactly what CheckPayload refuses, in the same
// words; it scans for numbers where CheckPayload parses.
func FuzzCheckPayloadRead(f *testing.F) {
	for _, seed := range []string{
		`{"account":"a","amount":5}`, `{"n":9007199254740993}`, `[1,2.50,-0,1e400]`, `{"s":"1e400","t":"\"9007199254740993"}`,
		`{"a\"b":0.10000000000000000001}`, `"\\"`, `-1E+2`, `{"a":[{"b":[1e-400]}]}`, `{"x":"\\\"","y":12345678901234567890}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) != nil {
			return
		}
		want, got := CheckPayload(b), CheckPayloadRead(b)
		if (want == nil) != (got == nil) || want != nil && want.Error() != got.Error() {
			t.Fatalf("CheckPayloadRead(%s) = %v; CheckPayload says %v", b, got, want)
		}
	})
}
