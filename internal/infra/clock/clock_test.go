package clock

import (
	"testing"
	"time"
)

// Now is time.Now shifted by Offset, whatever the build.
func TestNowIsShiftedByOffset(t *testing.T) {
	before := time.Now()
	now := Now()
	after := time.Now()
	if got := now.Add(-Offset()); got.Before(before) || got.After(after) {
		t.Errorf("Now() - Offset() = %v, want within [%v, %v] (Offset %v)", got, before, after, Offset())
	}
}
