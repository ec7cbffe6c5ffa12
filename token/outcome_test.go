package token

import (
	"errors"
	"testing"
)

// Every status that cannot carry a body is refused for either outcome, so
// that what is replayed is byte for byte what was stored.
func TestCheckOutcomeStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		to     State
		status int
		ok     bool
	}{
		{Consumed, 200, true},
		{Consumed, 201, true},
		{Consumed, 206, true},
		{Consumed, 299, true},
		{Consumed, 204, false}, // no body
		{Consumed, 205, false}, // no body
		{Consumed, 100, false},
		{Consumed, 304, false},
		{Consumed, 302, false},
		{Consumed, 422, false},
		{Consumed, 0, false},
		{Failed, 400, true},
		{Failed, 402, true},
		{Failed, 422, true},
		{Failed, 599, true},
		{Failed, 101, false},
		{Failed, 103, false},
		{Failed, 199, false},
		{Failed, 200, false},
		{Failed, 204, false},
		{Failed, 304, false},
		{Failed, 399, false},
		{Failed, 600, false},
		{Failed, 0, false},
		{Failed, -1, false},
		{Unknown, 200, false},
		{Pending, 200, false},
	}
	for _, tt := range tests {
		err := CheckOutcomeStatus(tt.to, tt.status)
		if tt.ok && err != nil {
			t.Errorf("CheckOutcomeStatus(%s, %d) = %v, want nil", tt.to, tt.status, err)
		}
		if !tt.ok && !errors.Is(err, ErrInvalidStatus) {
			t.Errorf("CheckOutcomeStatus(%s, %d) = %v, want ErrInvalidStatus", tt.to, tt.status, err)
		}
	}
}
