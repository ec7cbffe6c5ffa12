package token

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func mustDigest(t *testing.T, payload string, ignored []string) []byte {
	t.Helper()
	d, err := Digest([]byte(payload), ignored)
	if err != nil {
		t.Fatalf("Digest(%s, %q): %v", payload, ignored, err)
	}
	return d
}

func TestCanonical(t *testing.T) {
	tests := []struct {
		in, want string
		ignored  []string
	}{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`, nil},
		{` { "a" : [ 1.0 , 1e2 , -0 , "x" ] } `, `{"a":[1,100,0,"x"]}`, nil},
		{`{"s":"\u00e9\/\n"}`, `{"s":"é/\n"}`, nil},
		{`{"trace_id":"t","a":1}`, `{"a":1}`, []string{"trace_id"}},
		{`{"meta":{"trace_id":"t","k":1},"a":1}`, `{"a":1,"meta":{"k":1}}`, []string{"meta.trace_id"}},
		{`[1,{"b":2,"a":1}]`, `[1,{"a":1,"b":2}]`, []string{"a"}},
		{`"x"`, `"x"`, []string{"x"}},
		{`  12.50  `, `12.5`, nil},
	}
	for _, tt := range tests {
		got, err := Canonical([]byte(tt.in), tt.ignored)
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%s, %q) = %s, %v; want %s", tt.in, tt.ignored, got, err, tt.want)
		}
	}
}

// A stored payload digest outlives a release: if Digest changed, every token
// bound to a payload would fail its spend with payload_mismatch. The vector was
// computed independently: printf %s '{"account":"acc_1","amount":100}' | sha256sum.
func TestDigestGolden(t *testing.T) {
	got := mustDigest(t, `{ "amount": 100.0, "account": "acc_1", "trace_id": "abc" }`, []string{"trace_id"})
	const want = "1dae9ac28e78b11768ff6d89da343df993a78322adeaa4a05ea3847302bc4671"
	if hex.EncodeToString(got) != want {
		t.Errorf("Digest = %x, want %s", got, want)
	}
}

func TestDigestEqual(t *testing.T) {
	// Each pair is the same JSON value spelled differently, or differs only in
	// an ignored field; both must bind to the same token.
	tests := []struct {
		name    string
		a, b    string
		ignored []string
	}{
		{"whitespace", `{"account":"acc_1","amount":100}`, "{ \"account\" :\t\"acc_1\",\n  \"amount\" : 100 }\n", nil},
		{"member order", `{"account":"acc_1","amount":100}`, `{"amount":100,"account":"acc_1"}`, nil},
		{"nested member order", `{"x":{"b":[1,2],"a":null}}`, `{"x":{"a":null,"b":[1,2]}}`, nil},
		{"1.0 is 1", `{"amount":1}`, `{"amount":1.0}`, nil},
		{"1e2 is 100", `{"amount":100}`, `{"amount":1e2}`, nil},
		{"1E+2 is 100", `{"amount":100}`, `{"amount":1E+2}`, nil},
		{"-0 is 0", `{"amount":0}`, `{"amount":-0}`, nil},
		{"string escapes", `{"s":"é/"}`, `{"s":"\u00e9\/"}`, nil},
		{"ignored top-level field", `{"account":"acc_1","amount":100}`, `{"account":"acc_1","trace_id":"t-1","amount":100}`, []string{"trace_id"}},
		{"ignored field of any type", `{"amount":100}`, `{"amount":100,"trace_id":{"deep":[1,2,3]}}`, []string{"trace_id"}},
		{"ignored dotted path", `{"amount":100,"meta":{"source":"web"}}`, `{"amount":100,"meta":{"source":"web","trace_id":"t-1"}}`, []string{"meta.trace_id"}},
		{"ignored deep dotted path", `{"a":{"b":{"d":1}}}`, `{"a":{"b":{"c":2,"d":1}}}`, []string{"a.b.c"}},
		{"ignored field absent", `{"amount":100}`, `{"amount":100}`, []string{"trace_id", "meta.trace_id"}},
		{"ignored path through non-object", `{"meta":"x"}`, `{"meta":"x"}`, []string{"meta.trace_id"}},
		{"several ignored", `{"amount":100,"meta":{}}`, `{"request_id":1,"amount":100,"meta":{"trace_id":2}}`, []string{"trace_id", "request_id", "meta.trace_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The digest of the payload without the ignored fields (no
			// ignored list at all) is what an ignored field must not change.
			a := mustDigest(t, tt.a, nil)
			b := mustDigest(t, tt.b, tt.ignored)
			if !bytes.Equal(a, b) {
				t.Errorf("Digest(%s) = %x\nDigest(%s, %q) = %x\nwant equal", tt.a, a, tt.b, tt.ignored, b)
			}
			if len(b) != 32 {
				t.Errorf("len(Digest) = %d, want 32", len(b))
			}
		})
	}
}

func TestDigestDiffers(t *testing.T) {
	// Any change to a business field must change the digest, including when
	// the operation declares ignored fields.
	ignored := []string{"trace_id", "meta.trace_id"}
	base := `{"account":"acc_1","amount":100,"meta":{"trace_id":"t"}}`
	variants := []string{
		`{"account":"acc_2","amount":100,"meta":{"trace_id":"t"}}`,
		`{"account":"acc_1","amount":101,"meta":{"trace_id":"t"}}`,
		`{"account":"acc_1","amount":100.5,"meta":{"trace_id":"t"}}`,
		`{"account":"acc_1","amount":-100,"meta":{"trace_id":"t"}}`,
		`{"account":"acc_1","amount":"100","meta":{"trace_id":"t"}}`,
		`{"account":"acc_1","amount":100,"meta":{"trace_id":"t"},"memo":""}`,
		`{"account":"acc_1","amount":100,"meta":{"trace_id":"t","x":1}}`,
		`{"account":"acc_1","amount":100,"meta":null}`,
		`{"account":"acc_1","amount":100}`,
		`{"account":"acc_1","meta":{"trace_id":"t"}}`,
		`{"account":"ACC_1","amount":100,"meta":{"trace_id":"t"}}`,
		`{"account":"acc_1 ","amount":100,"meta":{"trace_id":"t"}}`,
		`{"Account":"acc_1","amount":100,"meta":{"trace_id":"t"}}`,
		`{"account":["acc_1"],"amount":100,"meta":{"trace_id":"t"}}`,
		// An ignored name is ignored only at its path.
		`{"account":"acc_1","amount":100,"meta":{"trace_id":"t"},"x":{"trace_id":1}}`,
	}
	want := mustDigest(t, base, ignored)
	seen := map[string]string{string(want): base}
	for _, v := range variants {
		got := mustDigest(t, v, ignored)
		if prev, ok := seen[string(got)]; ok {
			t.Errorf("Digest(%s) = Digest(%s)", v, prev)
		}
		seen[string(got)] = v
	}
}

func TestDigestInvalid(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"whitespace only", " \n"},
		{"duplicate key", `{"amount":1,"amount":2}`},
		{"duplicate key, different spelling", `{"amount":1,"\u0061mount":1}`},
		{"nested duplicate key", `{"meta":{"a":1,"a":1}}`},
		{"duplicate ignored key", `{"trace_id":1,"trace_id":2}`},
		{"truncated", `{"amount":1`},
		{"unquoted key", `{amount:1}`},
		{"single quotes", `{'amount':1}`},
		{"trailing comma", `{"amount":1,}`},
		{"trailing garbage", `{"amount":1}x`},
		{"two values", `{"amount":1} {"amount":1}`},
		{"NaN", `{"amount":NaN}`},
		{"out of range number", `{"amount":1e400}`},
		{"leading zero", `{"amount":01}`},
		{"invalid UTF-8", "{\"a\":\"\xff\"}"},
		{"lone surrogate", `{"a":"\ud800"}`},
		{"comment", `{"a":1 /* c */}`},
		// A double holds none of these exactly: the digest would bind
		// another number than the one sent.
		{"2^53+1", `{"order_id":9007199254740993}`},
		{"2^53+1 nested", `{"meta":{"ids":[1,9007199254740993]}}`},
		{"2^53+1 in an ignored field", `{"trace_id":9007199254740993}`},
		{"2^64", `{"n":18446744073709551616}`},
		{"decimal noise", `{"price":0.10000000000000000001}`},
		{"underflow", `{"n":1e-400}`},
		{"negative overflow", `{"n":-1e400}`},
		{"lone low surrogate", `{"a":"\udc00"}`},
	}
	for _, tt := range tests {
		for _, ignored := range [][]string{nil, {"trace_id"}} {
			if d, err := Digest([]byte(tt.in), ignored); !errors.Is(err, ErrInvalidPayload) || d != nil {
				t.Errorf("%s: Digest(%q, %q) = %x, %v; want ErrInvalidPayload", tt.name, tt.in, ignored, d, err)
			}
		}
	}
	if _, err := Digest(nil, nil); !errors.Is(err, ErrInvalidPayload) {
		t.Errorf("Digest(nil) error = %v, want ErrInvalidPayload", err)
	}
}

// Ignored fields name object members; a payload that is not an object has
// none, so the ignored list must not affect it.
// TestDigestBindsNumbersExactly: two payloads with one digest spell the same
// numbers. 2^53 and 2^53+1 are one double; only the first is accepted, so a
// spend naming the other cannot present the bound digest. Spellings of one
// value (1e23 and its digits, 0.1 and 0.10) stay one digest.
func TestDigestBindsNumbersExactly(t *testing.T) {
	bound := mustDigest(t, `{"order_id":9007199254740992}`, nil)
	for _, other := range []string{`{"order_id":9007199254740993}`, `{"order_id":9007199254740992.5}`, `{"order_id":9007199254740992.00000001}`} {
		if d, err := Digest([]byte(other), nil); err == nil {
			t.Errorf("Digest(%s) = %x, want a refusal (equal to the bound digest: %v)", other, d, bytes.Equal(d, bound))
		}
	}
	for _, pair := range [][2]string{
		{`{"n":9007199254740992}`, `{"n":9.007199254740992e15}`},
		{`{"n":1e23}`, `{"n":100000000000000000000000}`},
		{`{"n":0.1}`, `{"n":0.10}`},
		{`{"n":0}`, `{"n":-0}`}, // -0 is zero; RFC 8785 writes it 0
	} {
		if !bytes.Equal(mustDigest(t, pair[0], nil), mustDigest(t, pair[1], nil)) {
			t.Errorf("Digest(%s) != Digest(%s)", pair[0], pair[1])
		}
	}
}

func TestDigestNonObject(t *testing.T) {
	for _, payload := range []string{`[{"trace_id":1,"a":2}]`, `"trace_id"`, `42`, `null`, `true`, `[]`} {
		with := mustDigest(t, payload, []string{"trace_id", "a"})
		without := mustDigest(t, payload, nil)
		if !bytes.Equal(with, without) {
			t.Errorf("Digest(%s): ignored fields changed the digest of a non-object", payload)
		}
	}
	if bytes.Equal(mustDigest(t, `[1]`, nil), mustDigest(t, `1`, nil)) {
		t.Error("Digest([1]) = Digest(1)")
	}
}

func TestFingerprint(t *testing.T) {
	d1 := mustDigest(t, `{"amount":1}`, nil)
	d2 := mustDigest(t, `{"amount":2}`, nil)
	type input struct {
		op, subject string
		digest      []byte
		ttl         int
		version     string
	}
	base := input{"ledger.credit", "user-1", d1, 300, "v1"}
	inputs := []input{
		base,
		{"ledger.debit", "user-1", d1, 300, "v1"},
		{"ledger.credit", "user-2", d1, 300, "v1"},
		{"ledger.credit", "user-1", d2, 300, "v1"},
		{"ledger.credit", "user-1", nil, 300, "v1"},
		{"ledger.credit", "user-1", d1, 301, "v1"},
		{"ledger.credit", "user-1", d1, -300, "v1"},
		{"ledger.credit", "user-1", d1, 300, "v2"},
		{"ledger.credit", "user-1", d1, 300, ""},
		// Moving bytes across a field boundary must not give the same
		// fingerprint: fields are length-prefixed, not concatenated.
		{"a", "bc", nil, 0, ""},
		{"ab", "c", nil, 0, ""},
		{"", "abc", nil, 0, ""},
		{"abc", "", nil, 0, ""},
		{"x", "a", []byte("bc"), 0, ""},
		{"x", "ab", []byte("c"), 0, ""},
		{"x", "", nil, 0, "a"},
		{"x", "a", nil, 0, ""},
	}
	seen := map[string]input{}
	for _, in := range inputs {
		fp := Fingerprint(in.op, in.subject, in.digest, in.ttl, in.version)
		if len(fp) != 32 {
			t.Errorf("len(Fingerprint(%+v)) = %d, want 32", in, len(fp))
		}
		if prev, ok := seen[string(fp)]; ok {
			t.Errorf("Fingerprint(%+v) = Fingerprint(%+v)", in, prev)
		}
		seen[string(fp)] = in
	}
	again := Fingerprint(base.op, base.subject, bytes.Clone(base.digest), base.ttl, base.version)
	if !bytes.Equal(again, Fingerprint(base.op, base.subject, base.digest, base.ttl, base.version)) {
		t.Error("Fingerprint is not deterministic: a retry would look like a different intent")
	}
}
