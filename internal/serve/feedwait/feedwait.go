// Package feedwait parks long polls of the event feed at no cost to the
// database: one hub per process wakes every waiter of a tenant when the
// tenant's feed moves, and the waiters themselves issue no statement while
// they wait.
//
// The hub runs only while someone waits. It learns that a feed moved in two
// ways: a notification on event.NotifyChannel, sent by whichever process
// positions events (a reader, the webhook dispatcher, this hub), heard on
// one LISTEN connection; and one statement every PollInterval that gives
// positions to the waited tenants' settled events and answers their heads,
// so that events nobody else positions are found, and a feed is seen moving
// when notifications do not arrive (a transaction-pooling proxy).
package feedwait

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/infra/store"
)

// Defaults of Config.
const (
	DefaultPollInterval        = 250 * time.Millisecond
	DefaultMaxWaiters          = 4096
	DefaultMaxWaitersPerTenant = 1024
)

// ErrTooManyWaiters: the process, or the tenant in it, already has as many
// waiters as it allows.
var ErrTooManyWaiters = errors.New("feedwait: too many waiters")

// ErrClosed: the hub is closed (the server is shutting down); read without
// waiting.
var ErrClosed = errors.New("feedwait: closed")

// Config configures a Hub.
type Config struct {
	// Pool positions events and reads heads. Required.
	Pool *pgxpool.Pool
	// Listen is where the hub LISTENs: a pool with sessions of their own.
	// Default Pool.
	Listen *pgxpool.Pool
	// PollInterval is how often, while anyone waits, the hub positions the
	// waited tenants' events and reads their heads: one statement for all
	// of them. Default DefaultPollInterval.
	PollInterval time.Duration
	// MaxWaiters and MaxWaitersPerTenant cap the waiters parked at once.
	// Defaults DefaultMaxWaiters and DefaultMaxWaitersPerTenant.
	MaxWaiters, MaxWaitersPerTenant int
	// Logger gets the hub's failures. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("feedwait: Config.Pool is required")
	case c.PollInterval < 0 || c.MaxWaiters < 0 || c.MaxWaitersPerTenant < 0:
		return errors.New("feedwait: Config durations and caps must not be negative")
	}
	return nil
}

// Hub parks a process's waiters.
type Hub struct {
	cfg Config

	mu      sync.Mutex
	tenants map[string]*tenant
	total   int
	running bool
	closed  bool
}

type tenant struct {
	waiters int
	parked  map[*Waiter]struct{}
	changed chan struct{} // closed when the tenant's feed moves
	head    int64         // last head the hub saw; -1 before the first
}

// New returns a hub configured by cfg.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Listen = cmp.Or(cfg.Listen, cfg.Pool)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxWaiters = cmp.Or(cfg.MaxWaiters, DefaultMaxWaiters)
	cfg.MaxWaitersPerTenant = cmp.Or(cfg.MaxWaitersPerTenant, DefaultMaxWaitersPerTenant)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Hub{cfg: cfg, tenants: map[string]*tenant{}}, nil
}

// Waiter is one parked long poll.
type Waiter struct {
	h      *Hub
	tenant string
	left   bool
	done   chan struct{} // closed when the waiter must answer now
	ended  bool
	// evicted: its slot went to another tenant, and it counts no more.
	evicted bool
}

// Join parks a waiter for tenant, or answers ErrTooManyWaiters, or
// ErrClosed once the hub is closed. Leave it once done waiting.
//
// A full hub is shared out fairly: a tenant joining one with fewer waiters
// than the tenant with the most, by two or more, ends one of that tenant's
// waits early (Done), so that however many tenants hold long polls open,
// one with few still gets a slot; the tenant with the most is refused.
func (h *Hub) Join(tenantID string) (*Waiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	t := h.tenants[tenantID]
	mine := 0
	if t != nil {
		mine = t.waiters
	}
	if mine >= h.cfg.MaxWaitersPerTenant {
		return nil, ErrTooManyWaiters
	}
	if h.total >= h.cfg.MaxWaiters {
		if !h.evictFor(mine) {
			return nil, ErrTooManyWaiters
		}
	}
	if t == nil {
		t = &tenant{changed: make(chan struct{}), head: -1, parked: map[*Waiter]struct{}{}}
		h.tenants[tenantID] = t
	}
	w := &Waiter{h: h, tenant: tenantID, done: make(chan struct{})}
	t.parked[w] = struct{}{}
	t.waiters++
	h.total++
	if !h.running {
		h.running = true
		go h.run()
	}
	return w, nil
}

// evictFor ends one wait of the tenant with the most waiters, if it has at
// least two more than mine, and says whether it did. The ended waiter
// leaves when its request answers; until then the hub is over its cap by
// the waiters so ended, never by more.
func (h *Hub) evictFor(mine int) bool {
	var big *tenant
	for _, t := range h.tenants {
		if big == nil || t.waiters > big.waiters {
			big = t
		}
	}
	if big == nil || big.waiters < mine+2 {
		return false
	}
	for w := range big.parked {
		w.end()
		big.waiters-- // counted again as the share it held no more
		h.total--
		delete(big.parked, w)
		w.evicted = true
		return true
	}
	return false
}

// end closes w's Done; the caller holds h.mu.
func (w *Waiter) end() {
	if !w.ended {
		w.ended = true
		close(w.done)
	}
}

// Done is closed when the waiter must answer at once, whatever it read:
// another tenant needed its slot, or the hub was closed. Answering the
// feed as it is then (an empty page keeps the cursor) lets the client
// resume.
func (w *Waiter) Done() <-chan struct{} { return w.done }

// Close ends every wait at once (Done) and makes later joins ErrClosed:
// for a shutdown, which then waits for no long poll.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, t := range h.tenants {
		for w := range t.parked {
			w.end()
		}
	}
}

// Changed is closed the next time the tenant's feed moves. Take it before
// reading the feed, and wait on it after an empty read: a move between the
// two closes it already.
func (w *Waiter) Changed() <-chan struct{} {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	t := w.h.tenants[w.tenant]
	if t == nil { // evicted, and its tenant's other waiters gone since
		return w.done
	}
	return t.changed
}

// Leave unparks the waiter. It may be called more than once.
func (w *Waiter) Leave() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	if w.evicted {
		return // no longer counted
	}
	t := w.h.tenants[w.tenant]
	delete(t.parked, w)
	t.waiters--
	w.h.total--
	if t.waiters == 0 {
		delete(w.h.tenants, w.tenant)
	}
}

// Waiters answers how many waiters are parked, in all and per tenant.
func (h *Hub) Waiters() (total int, perTenant map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	perTenant = make(map[string]int, len(h.tenants))
	for id, t := range h.tenants {
		perTenant[id] = t.waiters
	}
	return h.total, perTenant
}

// wake wakes tenant's waiters, and remembers head when it is not -1.
func (h *Hub) wake(tenantID string, head int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenants[tenantID]
	if t == nil || head >= 0 && head == t.head {
		return
	}
	if head >= 0 {
		t.head = head
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// waited answers the tenants waited for, or none and stops the hub.
func (h *Hub) waited() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total == 0 {
		h.running = false
		return nil
	}
	return slices.Collect(maps.Keys(h.tenants))
}

// run polls while anyone waits, and listens meanwhile.
func (h *Hub) run() {
	ctx, cancel := context.WithCancel(context.Background())
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		h.listen(ctx)
	}()
	defer func() { cancel(); <-listened }()
	t := time.NewTicker(h.cfg.PollInterval)
	defer t.Stop()
	for {
		tenants := h.waited()
		if tenants == nil {
			return
		}
		if err := h.poll(ctx, tenants); err != nil {
			h.cfg.Logger.Warn("event feed waiters: poll failed; retrying", "err", err)
		}
		<-t.C
	}
}

// poll positions the settled events of tenants, in one statement, and wakes
// the waiters of those whose head moved.
func (h *Hub) poll(ctx context.Context, tenants []string) error {
	ctx, cancel := context.WithTimeout(ctx, max(h.cfg.PollInterval, time.Second))
	defer cancel()
	heads, err := event.Heads(ctx, h.cfg.Pool, tenants)
	if err != nil {
		return err
	}
	for id, head := range heads {
		h.wake(id, head)
	}
	return nil
}

// listen wakes the waiters of each tenant named on event.NotifyChannel
// until ctx ends, listening again after a failure.
func (h *Hub) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		h.cfg.Logger.Warn("event feed waiters: not listening; the poll still wakes them", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (h *Hub) listenOnce(ctx context.Context) error {
	pc, err := h.cfg.Listen.Acquire(ctx)
	if err != nil {
		return err
	}
	// Out of the pool for good: a listening connection never serves a query.
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if err := store.Listen(ctx, conn, event.NotifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.wake(n.Payload, -1)
	}
}
