//go:build tokend_faketime

package clock

import (
	"fmt"
	"os"
	"time"
)

// OffsetEnv names the environment variable a tokend_faketime build reads its
// offset from.
const OffsetEnv = "TOKEND_FAKETIME_OFFSET"

// offset is read once, when the process starts.
var offset = mustParseOffset(os.Getenv(OffsetEnv))

// parseOffset reads an offset in time.ParseDuration syntax; "" is zero.
func parseOffset(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("clock: %s=%q: %w", OffsetEnv, s, err)
	}
	return d, nil
}

func mustParseOffset(s string) time.Duration {
	d, err := parseOffset(s)
	if err != nil {
		panic(err)
	}
	return d
}
