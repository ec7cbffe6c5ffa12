package token_test

import (
	"errors"
	"testing"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/token"
)

func TestValidText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		want bool
	}{
		{"", true},
		{"alice", true},
		{"Zoë ☃ 🎉", true},
		{"\uFFFD", true}, // the replacement character is text
		{"a\x00b", false},
		{"\x00", false},
		{"a\xffb", false},
		{"\xc3(", false},
		{"\xed\xa0\x80", false}, // a surrogate half
	}
	for _, tt := range tests {
		if got := token.ValidText(tt.s); got != tt.want {
			t.Errorf("ValidText(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
	err := token.CheckText("subject", "ok", "reason", "a\x00")
	var inv *tokend.InvalidInputError
	if !errors.Is(err, token.ErrInvalidText) || !errors.As(err, &inv) ||
		inv.Field != "reason" || inv.Reason != "holds a NUL character (text must be valid UTF-8 without NUL)" {
		t.Errorf("CheckText = %v", err)
	}
	if err := token.CheckText("subject", "ok"); err != nil {
		t.Errorf("CheckText(ok) = %v", err)
	}
}
