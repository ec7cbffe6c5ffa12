package token

import (
	"encoding/base32"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// idTime decodes the millisecond timestamp NewID puts in front of an id.
func idTime(t *testing.T, id, prefix string) time.Time {
	t.Helper()
	body, ok := strings.CutPrefix(id, prefix)
	if !ok {
		t.Fatalf("id %q lacks prefix %q", id, prefix)
	}
	b, err := base32.HexEncoding.WithPadding(base32.NoPadding).DecodeString(strings.ToUpper(body))
	if err != nil {
		t.Fatalf("id %q does not decode: %v", id, err)
	}
	if len(b) != 16 {
		t.Fatalf("id %q decodes to %d bytes, want 16", id, len(b))
	}
	ms := uint64(binary.BigEndian.Uint16(b[0:2]))<<32 | uint64(binary.BigEndian.Uint32(b[2:6]))
	return time.UnixMilli(int64(ms))
}

func TestNewIDShape(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := NewID()
	after := time.Now()

	if !strings.HasPrefix(id, IDPrefix) {
		t.Errorf("NewID() = %q, want prefix %q", id, IDPrefix)
	}
	if len(id) != len(IDPrefix)+26 {
		t.Errorf("len(NewID()) = %d, want %d", len(id), len(IDPrefix)+26)
	}
	if !ValidID(id) {
		t.Errorf("ValidID(NewID()) = false for %q", id)
	}
	if ts := idTime(t, id, IDPrefix); ts.Before(before) || ts.After(after) {
		t.Errorf("NewID() timestamp %v not within [%v, %v]", ts, before, after)
	}
}

func TestNewOperationIDShape(t *testing.T) {
	id := NewOperationID()
	if !strings.HasPrefix(id, OperationIDPrefix) || len(id) != len(OperationIDPrefix)+26 {
		t.Errorf("NewOperationID() = %q, want %q and 26 characters", id, OperationIDPrefix)
	}
	// An operation id is not a token id: it must not be accepted where a
	// token id is expected.
	if ValidID(id) {
		t.Errorf("ValidID(%q) = true for an operation id", id)
	}
}

func TestValidID(t *testing.T) {
	for range 100 {
		if id := NewID(); !ValidID(id) {
			t.Fatalf("ValidID(%q) = false for a new id", id)
		}
	}

	good := "tok_" + strings.Repeat("0", 26)
	tests := []struct {
		in   string
		want bool
	}{
		{good, true},
		{"tok_" + strings.Repeat("v", 26), true},
		{"tok_0123456789abcdefghijklmnop", true},
		{"", false},
		{"tok_", false},
		{"tok", false},
		{"tok_" + strings.Repeat("0", 25), false},
		{"tok_" + strings.Repeat("0", 27), false},
		{"TOK_" + strings.Repeat("0", 26), false},
		{"tk_" + strings.Repeat("0", 27), false},
		{"op_" + strings.Repeat("0", 27), false},
		{strings.Repeat("0", 30), false},
		{"tok_" + strings.Repeat("0", 25) + "w", false}, // beyond base32hex
		{"tok_" + strings.Repeat("0", 25) + "z", false},
		{"tok_" + strings.Repeat("0", 25) + "A", false}, // ids are lower case
		{"tok_" + strings.Repeat("0", 25) + "-", false},
		{"tok_" + strings.Repeat("0", 25) + "=", false},
		{"tok_" + strings.Repeat("0", 25) + " ", false},
		{"tok_" + strings.Repeat("0", 25) + "\n", false},
		{"tok_" + strings.Repeat("0", 25) + "\x00", false},
		{" tok_" + strings.Repeat("0", 25), false},
		{"tok_" + strings.Repeat("0", 24) + "é", false}, // 26 bytes, 25 runes
		{"tok_" + strings.Repeat("0", 23) + "\xff\xfe\xfd", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.in); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// Ids from different milliseconds must sort in creation order, as strings,
// so that keyset pagination by id lists tokens oldest first.
func TestNewIDSortsByTime(t *testing.T) {
	for _, gen := range []struct {
		name string
		new  func() string
	}{
		{"NewID", NewID},
		{"NewOperationID", NewOperationID},
	} {
		prev := gen.new()
		for range 5 {
			time.Sleep(2 * time.Millisecond)
			next := gen.new()
			if next <= prev {
				t.Errorf("%s: %q created after %q sorts before it", gen.name, next, prev)
			}
			prev = next
		}
	}
}

func TestNewIDUnique(t *testing.T) {
	const n = 10000
	seen := make(map[string]bool, n)
	for range n {
		id := NewID()
		if seen[id] {
			t.Fatalf("NewID() returned %q twice in %d calls", id, n)
		}
		seen[id] = true
	}
}

// IDTime reads back the timestamp NewID stamped, which idTime decodes on its
// own, and refuses what is not a token id.
func TestIDTime(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := NewID()
	after := time.Now()
	got, ok := IDTime(id)
	if !ok || !got.Equal(idTime(t, id, IDPrefix)) || got.Before(before) || got.After(after) {
		t.Errorf("IDTime(%q) = %v, %v; want %v within [%v, %v]", id, got, ok, idTime(t, id, IDPrefix), before, after)
	}

	for in, want := range map[string]time.Time{
		"tok_" + strings.Repeat("0", 26):                time.UnixMilli(0),
		"tok_" + strings.Repeat("v", 26):                time.UnixMilli(1<<48 - 1),
		"tok_" + "0000000004" + strings.Repeat("0", 16): time.UnixMilli(1), // the 10th character is bits 45-49: 00100 sets bit 47, the timestamp's last
	} {
		if got, ok := IDTime(in); !ok || !got.Equal(want) {
			t.Errorf("IDTime(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "tok_", NewOperationID(), "tok_" + strings.Repeat("0", 25), "TOK_" + strings.Repeat("0", 26)} {
		if got, ok := IDTime(in); ok {
			t.Errorf("IDTime(%q) = %v, true; want false", in, got)
		}
	}
}
