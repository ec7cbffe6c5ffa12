package token

import (
	"fmt"
	"strings"
	"testing"
)

// largePayload returns an order-like payload of about 2 KB, with a trace id
// at the top and in a nested object so the ignored-field path has work to do.
func largePayload() []byte {
	var b strings.Builder
	b.WriteString(`{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","customer":"cus_8f2k","currency":"EUR","meta":{"trace_id":"00f067aa0ba902b7","source":"web"},"lines":[`)
	for i := range 16 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","name":"Item number %d, blue","qty":%d,"unit_price":%d.50,"tags":["a","b"]}`, i*7919, i, i%4+1, 100+i)
	}
	b.WriteString(`],"total":1234.5,"note":"leave at the door"}`)
	return []byte(b.String())
}

func BenchmarkDigest(b *testing.B) {
	small := []byte(`{"account":"acc_1","amount":100}`)
	smallTraced := []byte(`{"account":"acc_1","amount":100,"trace_id":"4bf92f3577b34da6"}`)
	large := largePayload()
	ignored := []string{"trace_id", "meta.trace_id"}
	for _, bm := range []struct {
		name    string
		payload []byte
		ignored []string
	}{
		{"ledger", small, nil},
		{"ledger/ignored", smallTraced, ignored},
		{"2KB", large, nil},
		{"2KB/ignored", large, ignored},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.payload)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Digest(bm.payload, bm.ignored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDerive(b *testing.B) {
	k := mustKeyring(b, testKey)
	keyID, nonce := k.CurrentKeyID(), NewNonce()
	id := NewID()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Derive(keyID, "acme", id, nonce); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHash(b *testing.B) {
	k := mustKeyring(b, testKey)
	s := mustDerive(b, k, k.CurrentKeyID(), "acme", NewID(), NewNonce())
	b.ReportAllocs()
	for b.Loop() {
		s.Hash()
	}
}

func BenchmarkNewID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		NewID()
	}
}
