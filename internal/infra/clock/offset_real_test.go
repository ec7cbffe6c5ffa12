//go:build !tokend_faketime

package clock

import "testing"

// Outside a tokend_faketime build the environment cannot skew the clock.
func TestOffsetIsZeroWithoutFaketime(t *testing.T) {
	t.Setenv("TOKEND_FAKETIME_OFFSET", "15s") // read by nothing in this build
	if Offset() != 0 {
		t.Errorf("Offset() = %v in a build without the tokend_faketime tag, want 0", Offset())
	}
}
