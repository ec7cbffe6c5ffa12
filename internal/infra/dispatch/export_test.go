package dispatch

import (
	"context"
	"net/netip"
	"syscall"

	"github.com/tokend/tokend/internal/infra/store"
)

// SendWithoutRecording claims and sends due deliveries, then forgets them,
// as a dispatcher killed between sending and recording would.
func SendWithoutRecording(ctx context.Context, d *Dispatcher) (int, error) {
	if err := d.fanOut(ctx); err != nil {
		return 0, err
	}
	cs, _, err := d.claim(ctx, newShares(d.cfg.Workers), d.cfg.Batch)
	for _, c := range cs {
		_, _ = d.attempt(ctx, c)
	}
	return len(cs), err
}

// Statements for plan tests.
var (
	FanOutSQL      = store.Statements().FanOutSQL
	ClaimPickSQL   = store.Statements().ClaimPickSQL
	ClaimLeaseSQL  = store.Statements().ClaimLeaseSQL
	BehindSQL      = store.Statements().BehindSQL
	UndeliveredSQL = store.Statements().UndeliveredSQL
)

// WithTestNetwork makes cfg's dispatcher resolve names with lookup instead
// of a DNS server, and pass each address it is about to connect to, with
// the dialer's verdict (nil: allowed), to guard, whose answer is final.
func WithTestNetwork(cfg Config, lookup func(ctx context.Context, host string) ([]netip.Addr, error), guard func(address string, verdict error) error) Config {
	p, err := newPolicy(cfg.AllowedHosts)
	if err != nil {
		panic(err)
	}
	cfg.lookup = lookup
	cfg.control = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		return guard(address, p.control(ctx, network, address, c))
	}
	return cfg
}

// Control is the dialer's verdict on address under allowed.
func Control(allowed []string, address string) error {
	p, err := newPolicy(allowed)
	if err != nil {
		return err
	}
	return p.control(context.Background(), "tcp", address, nil)
}

// ClaimOnly claims what d may (as a dispatcher with nothing in flight) and
// sends none of it, answering how many it leased.
func ClaimOnly(ctx context.Context, d *Dispatcher) (int, error) {
	cs, _, err := d.claim(ctx, newShares(d.cfg.Workers), d.cfg.Batch)
	return len(cs), err
}

// FanOutOnly positions and fans out, claiming nothing.
func FanOutOnly(ctx context.Context, d *Dispatcher) error { return d.fanOut(ctx) }
