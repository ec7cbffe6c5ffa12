package token

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/gowebpki/jcs"

	"github.com/tokend/tokend/internal/infra/jsonread"
)

// FuzzDigest checks that the digest depends on the JSON value only: any
// other encoder's spelling of the same value (here encoding/json's, with
// members in a different order and indented) digests the same, and the
// canonical form is a fixed point. ignored is a comma-separated field list.
func FuzzDigest(f *testing.F) {
	f.Add([]byte(`{"account":"acc_1","amount":100}`), "")
	f.Add([]byte(`{"amount":1e2,"account":"acc_1","trace_id":"t"}`), "trace_id")
	f.Add([]byte(`{"meta":{"trace_id":"t","k":[1.0,-0,"\u00e9"]},"a":null}`), "meta.trace_id,a")
	f.Add([]byte(`[{"b":true,"a":false},"<&>",1e21]`), "a")
	// Refused: what readers read two ways.
	f.Add([]byte(`{"amount":1,"amount":2}`), "")
	f.Add([]byte(`{"meta":{"k":1,"k":1}}`), "meta.k")
	f.Add([]byte(`{"order_id":9007199254740993}`), "")
	f.Add([]byte(`{"n":1e400}`), "")
	f.Add([]byte(`{"s":"\ud800"}`), "")
	f.Add([]byte("{\"s\":\"\xff\"}"), "")
	// Accepted: case variants are two members; -0 is zero.
	f.Add([]byte(`{"amount":1,"Amount":2,"n":-0}`), "Amount")
	// Where a pointer reads like an ignored path: an index, escapes.
	f.Add([]byte(`{"a":[{"b":1}],"c":{"0":2}}`), "a.0,c.0")
	f.Add([]byte(`{"x~y":{"p/q":1},"z":[1]}`), "x~y.p/q,z")
	f.Fuzz(func(t *testing.T, payload []byte, ignoredList string) {
		var ignored []string
		if ignoredList != "" {
			ignored = strings.Split(ignoredList, ",")
		}
		canon, err := Canonical(payload, ignored)
		if err != nil {
			if !errors.Is(err, ErrInvalidPayload) {
				t.Fatalf("Canonical error %v does not wrap ErrInvalidPayload", err)
			}
			return
		}
		digest, err := Digest(payload, ignored)
		if err != nil {
			t.Fatalf("Canonical accepted %q but Digest failed: %v", payload, err)
		}
		if sum := sha256.Sum256(canon); !bytes.Equal(digest, sum[:]) {
			t.Fatalf("Digest is not SHA-256 of Canonical for %q", payload)
		}

		// The reading that finds no ignored member must give what reading
		// the canonical form again and removing found nothing gave.
		if slow, err := canonicalByRemoval(payload, ignored); err != nil || !bytes.Equal(slow, canon) {
			t.Fatalf("Canonical(%q, %q) = %s; removal on every object gives %s (%v)", payload, ignored, canon, slow, err)
		}

		again, err := Canonical(canon, ignored)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("Canonical is not a fixed point:\n in   %s\n once %s\n twice %s (%v)", payload, canon, again, err)
		}
		// With nothing ignored, canonical text must still be canonical: the
		// removal step must not leave a non-JCS encoding behind.
		if plain, err := Canonical(canon, nil); err != nil || !bytes.Equal(plain, canon) {
			t.Fatalf("Canonical(%s, nil) = %s, %v; want it unchanged", canon, plain, err)
		}

		var v any
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("Digest accepted %q but encoding/json rejects it: %v", payload, err)
		}
		if _, ok := v.(map[string]any); ok {
			var c map[string]any
			if err := json.Unmarshal(canon, &c); err != nil {
				t.Fatalf("canonical form %s of an object does not decode: %v", canon, err)
			}
			for _, f := range ignored {
				if hasPath(c, strings.Split(f, ".")) {
					t.Fatalf("Canonical(%q, %q) = %s still holds %q", payload, ignored, canon, f)
				}
			}
		}

		var reversed bytes.Buffer
		writeReversed(t, &reversed, v, "\n")
		indented, err := json.MarshalIndent(v, "", "\t")
		if err != nil {
			t.Fatalf("encoding/json cannot re-encode %q: %v", payload, err)
		}
		for _, other := range [][]byte{reversed.Bytes(), indented} {
			d, err := Digest(other, ignored)
			if err != nil {
				t.Fatalf("Digest(%s) of re-encoded %q: %v", other, payload, err)
			}
			if !bytes.Equal(d, digest) {
				t.Fatalf("re-encoding changed the digest:\n original   %q\n re-encoded %s", payload, other)
			}
		}
	})
}

func hasPath(doc map[string]any, path []string) bool {
	v, ok := doc[path[0]]
	if !ok || len(path) == 1 {
		return ok
	}
	child, ok := v.(map[string]any)
	return ok && hasPath(child, path[1:])
}

// writeReversed encodes v as JSON with object members in reverse sorted
// order, one per line, so member order and whitespace differ from both the
// input and canonical form. Scalars are spelled by encoding/json.
func writeReversed(t *testing.T, buf *bytes.Buffer, v any, indent string) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		slices.Reverse(keys)
		buf.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				buf.WriteString(",")
			}
			buf.WriteString(indent + "  ")
			writeReversed(t, buf, k, indent+"  ")
			buf.WriteString(" : ")
			writeReversed(t, buf, v[k], indent+"  ")
		}
		buf.WriteString(indent + "}")
	case []any:
		buf.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				buf.WriteString(" ,\t")
			}
			writeReversed(t, buf, e, indent)
		}
		buf.WriteString(" ]")
	default:
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("encoding/json cannot encode %#v: %v", v, err)
		}
		buf.Write(b)
	}
}

// FuzzParseSecret checks that any string, however odd, is either rejected
// with ErrMalformedSecret or accepted as a prefixed secret that parses again.
func FuzzParseSecret(f *testing.F) {
	f.Add("tks_9Z0iQStd9EyoBdxB1UTWBjaItBJLIsC9MdHf3nAmMfg")
	f.Add("tks_")
	f.Add("")
	f.Add("tks_9Z0iQStd9EyoBdxB1UTWBjaItBJLIsC9MdHf3nAmMf=")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSecret(in)
		if err != nil {
			if !errors.Is(err, ErrMalformedSecret) || s != "" {
				t.Fatalf("ParseSecret(%q) = %q, %v; want \"\", ErrMalformedSecret", in, s.Reveal(), err)
			}
			return
		}
		if s.Reveal() != in {
			t.Fatalf("ParseSecret(%q) = %q, want the input back", in, s.Reveal())
		}
		if !strings.HasPrefix(in, SecretPrefix) {
			t.Fatalf("ParseSecret accepted %q without the %q prefix", in, SecretPrefix)
		}
		again, err := ParseSecret(s.Reveal())
		if err != nil || again != s {
			t.Fatalf("accepted secret %q does not parse again: %v", in, err)
		}
		if body := in[len(SecretPrefix):]; strings.Contains(s.String(), body) {
			t.Fatalf("String() of an accepted secret shows it: %q", s.String())
		}
	})
}

var validIDPattern = regexp.MustCompile(`\Atok_[0-9a-v]{26}\z`)

// FuzzValidID compares ValidID with a regular expression for the same shape.
func FuzzValidID(f *testing.F) {
	f.Add("tok_01jde4w7y8m3r5t6v9x0a1b2c3")
	f.Add("tok_0123456789abcdefghijklmnop")
	f.Add("tok_")
	f.Add("op_0123456789abcdefghijklmnopq")
	f.Fuzz(func(t *testing.T, in string) {
		if got, want := ValidID(in), validIDPattern.MatchString(in); got != want {
			t.Fatalf("ValidID(%q) = %v, want %v", in, got, want)
		}
	})
}

// canonicalByRemoval is Canonical as it was before it looked for ignored
// members while checking: every object with ignored fields is read again
// and the fields removed from it.
func canonicalByRemoval(payload []byte, ignored []string) ([]byte, error) {
	if err := jsonread.CheckPayload(payload); err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(payload)
	if err != nil || len(ignored) == 0 || len(canon) == 0 || canon[0] != '{' {
		return canon, err
	}
	var doc map[string]any
	if err := jsonread.Unmarshal(canon, &doc); err != nil {
		return nil, err
	}
	removed := false
	for _, f := range ignored {
		removed = removePath(doc, strings.Split(f, ".")) || removed
	}
	if !removed {
		return canon, nil
	}
	b, err := jsonv2.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(b)
}
