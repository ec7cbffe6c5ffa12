package clock

import "time"

// Now returns the current time of the process clock: time.Now, shifted by
// Offset.
func Now() time.Time { return time.Now().Add(offset) }

// Offset is how far Now is shifted from time.Now: always zero, except in a
// tokend_faketime build (see the package doc).
func Offset() time.Duration { return offset }
