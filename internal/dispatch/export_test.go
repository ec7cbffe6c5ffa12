package dispatch

import (
	"context"
)

// SendWithoutRecording claims and sends due deliveries, then forgets them,
// as a dispatcher killed between sending and recording would.
func SendWithoutRecording(ctx context.Context, d *Dispatcher) (int, error) {
	if err := d.fanOut(ctx); err != nil {
		return 0, err
	}
	cs, err := d.claim(ctx)
	for _, c := range cs {
		_, _ = d.attempt(ctx, c)
	}
	return len(cs), err
}

// Statements for plan tests.
var (
	FanOutSQL = fanOutSQL
	ClaimSQL  = claimSQL
)
