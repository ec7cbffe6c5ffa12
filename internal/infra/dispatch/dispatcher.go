package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
	"github.com/tokend/tokend/webhook"
)

// Defaults of Config.
const (
	DefaultInterval     = 500 * time.Millisecond
	DefaultTimeout      = 10 * time.Second
	DefaultLease        = 30 * time.Second
	DefaultMaxAge       = 24 * time.Hour
	DefaultDisableAfter = 72 * time.Hour
	DefaultBackoffBase  = time.Second
	DefaultBackoffMax   = time.Hour
	DefaultBatch        = 32
	// DefaultEndpointConcurrency is the most deliveries one endpoint has in
	// flight, on all instances together.
	DefaultEndpointConcurrency = 4
	// DefaultTenantConcurrency is the most deliveries one tenant's endpoints
	// have in flight, on all instances together: a tenant's share.
	DefaultTenantConcurrency = 16
	// DefaultWorkers is the most deliveries one dispatcher sends at once.
	DefaultWorkers       = 64
	DefaultRetryAfterMax = time.Hour
)

// Config configures a Dispatcher.
type Config struct {
	Pool *pgxpool.Pool  // required
	Keys *token.Keyring // required: endpoints' secrets are derived from it
	// Interval is the pause between rounds that found nothing to do, and
	// between fan-out passes that left no endpoint behind. Defaults to
	// 500 ms.
	Interval time.Duration
	// Timeout bounds each attempt. Defaults to 10 s.
	Timeout time.Duration
	// Lease is how long a claimed delivery is this dispatcher's; it must
	// outlast Timeout. Defaults to 30 s.
	Lease time.Duration
	// MaxAge is how long a delivery is tried before it fails for good.
	// Defaults to 24 h.
	MaxAge time.Duration
	// DisableAfter disables an endpoint whose every attempt has failed for
	// this long. Defaults to 72 h.
	DisableAfter time.Duration
	// BackoffBase and BackoffMax bound the wait after a failed attempt: the
	// base doubled per attempt, up to the max, with full jitter. Default
	// 1 s and 1 h.
	BackoffBase, BackoffMax time.Duration
	// Batch is the most deliveries claimed at once. Defaults to 32.
	Batch int
	// EndpointConcurrency is the most deliveries an endpoint has in flight,
	// TenantConcurrency the most a tenant's endpoints have, on all
	// instances together: a tenant's hanging endpoints hold at most
	// TenantConcurrency attempts, each for at most Timeout, and the rest
	// of the dispatcher goes to other tenants. Default 4 and 16.
	EndpointConcurrency, TenantConcurrency int
	// Workers is the most deliveries this dispatcher sends at once; it
	// claims more as they finish, without waiting for a whole batch.
	// Default 64.
	Workers int
	// RetryAfterMax bounds the wait a 429 or 503 answer asks for with
	// Retry-After. Defaults to 1 h.
	RetryAfterMax time.Duration
	// AllowedHosts (TOKEND_WEBHOOK_ALLOWED_HOSTS) are host names, IP
	// addresses and CIDRs. Empty, deliveries go to any address that is not
	// Forbidden; not empty, only to the hosts named (whatever they resolve
	// to) and the addresses listed, forbidden or not. Default: empty.
	AllowedHosts []string
	// Proxy (TOKEND_WEBHOOK_PROXY, read by ParseProxy) sends deliveries
	// through an egress proxy, as a CONNECT tunnel to the address the guard
	// allowed. Default: nil, every delivery connects directly.
	Proxy  ProxyFunc
	Logger *slog.Logger // defaults to slog.Default()
	// Tracer, when set, makes a span of each delivery attempt, the root of
	// a trace of its own (the request whose event it carries is long over,
	// and its trace context is not stored with the event), with the
	// statements that record the attempt under it. Nil: no spans.
	Tracer trace.TracerProvider

	// lookup and control replace the resolver and the dialer's check in
	// tests, so that no test asks a DNS server or connects outside loopback.
	lookup  lookupFunc
	control func(context.Context, string, string, syscall.RawConn) error
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil || c.Keys == nil:
		return errors.New("dispatch: Config.Pool and Config.Keys are required")
	case c.Interval < 0, c.Timeout < 0, c.Lease < 0, c.MaxAge < 0, c.DisableAfter < 0, c.BackoffBase < 0, c.BackoffMax < 0, c.Batch < 0,
		c.EndpointConcurrency < 0, c.TenantConcurrency < 0, c.Workers < 0, c.RetryAfterMax < 0:
		return errors.New("dispatch: Config durations and counts must not be negative")
	case cmp.Or(c.Lease, DefaultLease) <= cmp.Or(c.Timeout, DefaultTimeout):
		return fmt.Errorf("dispatch: Lease %v must outlast Timeout %v", cmp.Or(c.Lease, DefaultLease), cmp.Or(c.Timeout, DefaultTimeout))
	}
	return CheckAllowedHosts(c.AllowedHosts)
}

// Dispatcher delivers events to webhook endpoints.
type Dispatcher struct {
	cfg      Config
	log      *slog.Logger
	send     *sender
	attempts *prometheus.CounterVec
	lag      prometheus.Histogram
}

// New returns a Dispatcher configured by cfg.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.MaxAge = cmp.Or(cfg.MaxAge, DefaultMaxAge)
	cfg.DisableAfter = cmp.Or(cfg.DisableAfter, DefaultDisableAfter)
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, DefaultBackoffBase)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, DefaultBackoffMax)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.EndpointConcurrency = cmp.Or(cfg.EndpointConcurrency, DefaultEndpointConcurrency)
	cfg.TenantConcurrency = cmp.Or(cfg.TenantConcurrency, DefaultTenantConcurrency)
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	cfg.RetryAfterMax = cmp.Or(cfg.RetryAfterMax, DefaultRetryAfterMax)
	p, err := newPolicy(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg:  cfg,
		log:  cmp.Or(cfg.Logger, slog.Default()),
		send: newSender(cfg.Timeout, p, cfg.lookup, cfg.control, cfg.Proxy),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tokend", Subsystem: "webhook", Name: "attempts_total",
			Help: "Webhook delivery attempts, by result: delivered, refused (a non-2xx answer), throttled (429 or 503 with Retry-After), gone (410: the endpoint is disabled), error (no answer) or not_allowed (an address deliveries may not go to).",
		}, []string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tokend", Subsystem: "webhook", Name: "delivery_lag_seconds",
			Help:    "From an event's commit to its delivery's 2xx answer, for deliveries made at their first attempt and after retries.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400},
		}),
	}
	for _, r := range []string{"delivered", "refused", "throttled", "gone", "error", "not_allowed"} {
		d.attempts.WithLabelValues(r)
	}
	return d, nil
}

// Run delivers until ctx ends, and returns ctx's error. It keeps up to
// Config.Workers deliveries in flight, claiming more as they finish, and
// hands its workers out among tenants by their shares (shares), so that a
// slow or hanging endpoint holds its own tenant's share and nobody else's.
// Fanning out runs beside it, in a goroutine of its own (fanOutLoop), so
// that a tenant's backlog being fanned out never holds the claims back.
func (d *Dispatcher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	fanned := make(chan struct{}, 1)
	wg.Go(func() { d.fanOutLoop(ctx, fanned) })
	done := make(chan claimed, d.cfg.Workers)
	s := newShares(d.cfg.Workers)
	var ids uint64
	for {
		n := 0
		cs, starved, err := d.claim(ctx, s, d.cfg.Batch)
		if err != nil && ctx.Err() == nil {
			d.log.Error("webhooks: dispatch round", "err", err)
		}
		for _, c := range cs {
			ids++
			c.id = ids
			actx, cancel := context.WithCancelCause(ctx)
			s.fly(c, cancel)
			wg.Go(func() {
				defer cancel(nil)
				d.deliver(ctx, actx, c)
				done <- c
			})
		}
		n = len(cs)
		if starved > 0 {
			s.preempt(starved, time.Now())
		}
		wait := d.cfg.Interval
		if n > 0 && s.free() > 0 {
			wait = 0 // more may be due right now
		} else if s.contended {
			wait = d.cfg.Interval / 10 // what another instance's claim did not see may be due
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case c := <-done:
			s.end(c)
		case <-fanned:
		case <-timer.C:
		}
		timer.Stop()
		for drained := false; !drained; {
			select {
			case c := <-done:
				s.end(c)
			default:
				drained = true
			}
		}
	}
}

// Round runs one round (position, fan out, claim and send) and answers how
// many deliveries it attempted, once they are all recorded.
func (d *Dispatcher) Round(ctx context.Context) (int, error) {
	if err := d.fanOut(ctx); err != nil {
		return 0, err
	}
	claimed, _, err := d.claim(ctx, newShares(d.cfg.Workers), d.cfg.Batch)
	var wg sync.WaitGroup
	for _, c := range claimed { // leased even when err: sent and recorded
		wg.Go(func() { d.deliver(ctx, ctx, c) })
	}
	wg.Wait()
	return len(claimed), err
}

// fanOutLoop fans out until ctx ends: a pass at once while the last one
// left endpoints behind; else a pass of every webhook tenant once per
// Config.Interval and, between them, every Interval/10, a pass of the
// tenants whose events were fanned out in the last Interval (active);
// after each pass it wakes Run's claims.
//
// The short passes are for a tenant's new events: an event is positioned
// only once every older transaction has ended (event.Heads), so a pass can
// find nothing of an event committed just before it, and one Interval
// more was most of a healthy tenant's delivery lag beside a hostile one
// (R3 of issue 48: commit to fan-out p50 0.5 s, p99 1.5 s). They cost a
// statement per active tenant, none per idle one: idle, the loop runs one
// pass an Interval, as before.
func (d *Dispatcher) fanOutLoop(ctx context.Context, fanned chan<- struct{}) {
	c := cadence{interval: d.cfg.Interval, active: map[string]time.Time{}}
	for ctx.Err() == nil {
		start := time.Now()
		more, moved, err := d.fanOutPass(ctx, fanned, c.next(start))
		if err != nil && ctx.Err() == nil {
			d.log.Error("webhooks: fan out", "err", err)
		}
		wait := c.done(start, time.Now(), moved)
		if more && err == nil {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// cadence is fanOutLoop's schedule: when its last pass of every tenant
// ran, and the tenants whose events were fanned out in the last interval.
type cadence struct {
	interval time.Duration
	full     time.Time
	active   map[string]time.Time
}

// next answers the tenants a pass starting at now positions: nil for
// every tenant, once an interval after the last such pass, else the
// active ones.
func (c *cadence) next(now time.Time) []string {
	if now.Sub(c.full) >= c.interval {
		c.full = now
		return nil
	}
	return slices.Sorted(maps.Keys(c.active))
}

// done records a pass that ran from start to now and fanned out events of
// the tenants moved, and answers how long to wait for the next pass: until
// an interval after the last pass of every tenant; while a tenant is
// active, at most a tenth of an interval, but no less than the pass took.
// The floor keeps the loop's share of the database at half at most: many
// active tenants make long passes, and passes back to back would fan out
// each endpoint's events in ever smaller pages (with 24 tenants writing to
// 10 endpoints each, a healthy tenant's fan-out p99 went from 0.9 s to
// 2.2 s without it).
func (c *cadence) done(start, now time.Time, moved []string) time.Duration {
	for _, t := range moved {
		c.active[t] = now
	}
	for t, at := range c.active {
		if now.Sub(at) >= c.interval {
			delete(c.active, t)
		}
	}
	wait := max(c.interval-now.Sub(c.full), 0)
	if len(c.active) > 0 {
		wait = min(wait, max(c.interval/10, now.Sub(start)))
	}
	return wait
}

// fanOut fans out until no endpoint is behind.
func (d *Dispatcher) fanOut(ctx context.Context) error {
	for {
		more, _, err := d.fanOutPass(ctx, nil, nil)
		if err != nil || !more {
			return err
		}
	}
}

// fanOutPass positions the events of every webhook tenant (of only those in
// only, when not nil), in one round trip when none has new ones
// (event.Heads), then gives every endpoint
// behind one page (store.FanOutBatch), taking the tenants round robin, one
// endpoint of each at a time, and waking the claims (fanned, when not nil)
// after each turn: a tenant with many endpoints behind does not keep the
// others' deliveries from being made. more is whether one was left behind;
// moved, the tenants some of whose events it fanned out. Idle, it costs
// three statements whatever the number of tenants.
func (d *Dispatcher) fanOutPass(ctx context.Context, fanned chan<- struct{}, only []string) (more bool, moved []string, err error) {
	start := time.Now()
	tenants := only
	if tenants == nil {
		if tenants, err = store.WebhookTenants(ctx, d.cfg.Pool); err != nil {
			return false, nil, err
		}
	}
	if _, err := event.Heads(ctx, d.cfg.Pool, tenants); err != nil {
		return false, nil, err
	}
	behind, err := store.Behind(ctx, d.cfg.Pool)
	if err != nil {
		return false, nil, err
	}
	var order []string
	by := map[string][]store.EndpointKey{}
	for _, ep := range behind {
		if by[ep.Tenant] == nil {
			order = append(order, ep.Tenant)
		}
		by[ep.Tenant] = append(by[ep.Tenant], ep)
	}
	// Each pass starts each tenant's turns at an endpoint of its own at
	// random: a pass cut short after its first turns leaves no endpoint
	// behind for good.
	for t, eps := range by {
		i := rand.IntN(len(eps))
		by[t] = append(eps[i:], eps[:i]...)
	}
	for i := 0; ; i++ {
		turn := false
		for _, t := range order {
			if i >= len(by[t]) {
				continue
			}
			turn = true
			seen, _, err := store.FanOut(ctx, d.cfg.Pool, by[t][i])
			if err != nil {
				return false, moved, err
			}
			more = more || seen >= store.FanOutBatch
			if seen > 0 && (len(moved) == 0 || moved[len(moved)-1] != t) {
				moved = append(moved, t)
			}
		}
		if !turn {
			return more, moved, nil
		}
		if fanned != nil {
			select {
			case fanned <- struct{}{}:
			default:
			}
		}
		// A pass over many endpoints behind (hostile tenants' backlogs)
		// ends after the turn that takes it past half an Interval: the
		// next pass positions the events written meanwhile and starts
		// again with every tenant's first endpoint, so a tenant's new
		// events wait for about half an Interval, not for every endpoint
		// of every tenant behind.
		if time.Since(start) > d.cfg.Interval/2 {
			return true, moved, nil
		}
	}
}

// claimed is a delivery this dispatcher holds the lease of.
type claimed struct {
	id                    uint64 // Run's number for it, while in flight
	tenant, endpoint, url string
	pos                   int64
	attempt               int
	nonce                 []byte
	keyID                 string
	prevNonce             []byte  // the rotated-out secret, during its overlap
	prevKeyID             *string // likewise
	suspect               bool    // the endpoint's last attempt failed
	event                 webhook.Event
}

// claim leases up to n due deliveries as s allots them. Which tenants have
// deliveries due, and what each has in flight on every instance, is read
// first (store.DueTenantsSQL); with none, no claim is made. A tenant at its
// TenantConcurrency on all instances together is not claimed for: the
// claim would lease nothing. Each tenant is claimed in a transaction of its
// own under its own claim lock (store.ClaimLock), taken only if no other
// instance holds it, so instances claiming different tenants never wait
// for one another, and a tenant whose claim is slow (a large backlog, its
// rows locked by an operator's disable) holds back no one else's. On an
// error, the deliveries already claimed are answered with it: they are
// leased and must be sent.
func (d *Dispatcher) claim(ctx context.Context, s *shares, n int) ([]claimed, int, error) {
	rows, err := store.DueTenants(ctx, d.cfg.Pool)
	if err != nil {
		return nil, 0, fmt.Errorf("webhooks: claim: %w", err)
	}
	s.contended = false
	due := make([]string, 0, len(rows))
	s.elsewhere = make(map[string]int, len(rows))
	for _, r := range rows {
		s.elsewhere[r.Tenant] = r.InFlight
		if r.InFlight < d.cfg.TenantConcurrency {
			due = append(due, r.Tenant)
		}
	}
	if len(due) == 0 {
		return nil, 0, nil
	}
	if s.free() == 0 { // no claim to make: only count who waits
		starved := 0
		for _, t := range due {
			if s.newcomer(t) {
				starved++
			}
		}
		return nil, starved, nil
	}
	cs, starved, err := s.allot(due, n, func(tenant string, limit, suspect int) ([]claimed, error) {
		var out []claimed
		err := pgx.BeginFunc(ctx, d.cfg.Pool, func(tx pgx.Tx) error {
			out = nil
			if got, err := store.ClaimLock(ctx, tx, tenant); err != nil || !got {
				s.contended = s.contended || err == nil // another instance is claiming tenant's deliveries now
				return err
			}
			rows, err := store.Claim(ctx, tx, store.ClaimParams{Tenant: tenant, Limit: limit, LeaseSeconds: d.cfg.Lease.Seconds(),
				EndpointConcurrency: d.cfg.EndpointConcurrency, TenantConcurrency: d.cfg.TenantConcurrency, SuspectLimit: suspect})
			if err != nil {
				return err
			}
			out = make([]claimed, len(rows))
			for i, r := range rows {
				out[i] = claimed{tenant: r.Tenant, endpoint: r.Endpoint, url: r.URL, pos: r.Pos, attempt: r.Attempt,
					nonce: r.Nonce, keyID: r.KeyID, prevNonce: r.PrevNonce, prevKeyID: r.PrevKeyID, suspect: r.Suspect,
					event: webhook.Event(r.Event)}
			}
			return nil
		})
		if err != nil {
			return nil, err // rolled back: nothing of tenant's was leased
		}
		return out, nil
	})
	if err != nil {
		return cs, starved, fmt.Errorf("webhooks: claim: %w", err)
	}
	return cs, starved, nil
}

// deliver sends one claimed delivery under actx (which preempt may
// cancel) and records the answer; ctx ending is a shutdown.
func (d *Dispatcher) deliver(ctx, actx context.Context, c claimed) {
	log := d.log.With("tenant", c.tenant, "endpoint", c.endpoint, "event", c.event.ID, "attempt", c.attempt)
	var result string // what the attempt came to, for its span
	if d.cfg.Tracer != nil {
		var span trace.Span
		ctx, span = d.cfg.Tracer.Tracer("github.com/tokend/tokend").Start(ctx, "webhook delivery", trace.WithNewRoot(),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
				attribute.String("tokend.tenant", c.tenant),
				attribute.String("tokend.webhook.endpoint", c.endpoint),
				attribute.String("tokend.event.id", c.event.ID),
				attribute.String("tokend.event.type", c.event.Type),
				attribute.Int("tokend.webhook.attempt", c.attempt)))
		actx = trace.ContextWithSpan(actx, span)
		// Never the URL: a receiver's may hold a credential of its own.
		defer func() {
			if result != "" {
				span.SetAttributes(attribute.String("tokend.webhook.result", result))
			}
			if result != "delivered" {
				span.SetStatus(codes.Error, result)
			}
			span.End()
		}()
	}
	start := time.Now()
	ans, sendErr := d.attempt(actx, c)
	if ctx.Err() != nil {
		result = "shutdown"
		return // shutting down: the lease runs out and another round sends it
	}
	if ans.status != 0 {
		trace.SpanFromContext(actx).SetAttributes(semconv.HTTPResponseStatusCode(ans.status))
	}
	if errors.Is(context.Cause(actx), errPreempted) {
		sendErr = errPreempted
	}
	status := ans.status
	ms := time.Since(start).Milliseconds()
	var err error
	a := store.AttemptParams{Tenant: c.tenant, Endpoint: c.endpoint, Pos: c.pos, Attempt: c.attempt}
	switch {
	case sendErr == nil && status/100 == 2:
		result = "delivered"
		d.attempts.WithLabelValues(result).Inc()
		a.DurationMS = ms
		var recorded bool
		recorded, err = store.Delivered(ctx, d.cfg.Pool, a, status)
		if err == nil && recorded {
			d.lag.Observe(time.Since(c.event.At).Seconds())
		}
	default:
		result = "refused"
		var st *int
		wait := d.backoff(c.attempt)
		gone := false
		switch {
		case errors.Is(sendErr, ErrAddressNotAllowed):
			result, ms = "not_allowed", 0 // nothing about the target, its timing neither
		case sendErr != nil:
			result = "error"
		default:
			st = &status
			switch after, ok := retryAfter(ans.retryAfter, time.Now()); {
			case status == 410:
				result, gone = "gone", true
			case (status == 429 || status == 503) && ok:
				// Retry-After may lengthen the backoff, never shorten it.
				result, wait = "throttled", max(min(after, d.cfg.RetryAfterMax), wait)
			}
		}
		// What the tenant reads: one sentence, never the status again.
		msg := attemptError(sendErr, status, result == "throttled", wait, d.cfg.Timeout)
		d.attempts.WithLabelValues(result).Inc()
		a.DurationMS = ms
		var state string
		state, err = store.Failed(ctx, d.cfg.Pool, a, store.FailedParams{Status: st, Error: msg, WaitSeconds: wait.Seconds(),
			MaxAgeSeconds: d.cfg.MaxAge.Seconds(), DisableAfterSeconds: d.cfg.DisableAfter.Seconds(), Gone: gone})
		if err == nil {
			log.Warn("webhooks: delivery failed", "result", result, "status", status, "err", sendErr, "state", state)
		}
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation:
		// An operator deleted the endpoint, and its deliveries with it,
		// while this attempt was in flight: there is nothing to record on.
		log.Info("webhooks: the endpoint was deleted during the attempt; nothing to record")
	case err != nil:
		log.Error("webhooks: record the attempt", "err", err)
	}
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// attempt signs and sends c once. The body is the same on every attempt:
// its timestamp is when the event happened; only the webhook-timestamp
// header and the signature are the attempt's.
func (d *Dispatcher) attempt(ctx context.Context, c claimed) (answer, error) {
	secrets := make([]string, 0, 2)
	s, err := secret(d.cfg.Keys, c.keyID, c.tenant, c.endpoint, c.nonce)
	if err != nil {
		return answer{}, errKeyRetired
	}
	secrets = append(secrets, s)
	if c.prevKeyID != nil {
		// In the rotated-out secret's overlap; one whose server key was
		// retired since signs no more.
		if s, err := secret(d.cfg.Keys, *c.prevKeyID, c.tenant, c.endpoint, c.prevNonce); err == nil {
			secrets = append(secrets, s)
		}
	}
	body, err := encodeBody(webhook.Delivery{Type: "token." + c.event.Type, Timestamp: c.event.At.UTC(), Data: c.event})
	if err != nil {
		return answer{}, err
	}
	h, err := webhook.SignAll(secrets, c.event.ID, time.Now(), body)
	if err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	return d.send.send(ctx, c.url, h, body)
}

// backoff is the wait after failed attempt n (from 1): the base doubled per
// attempt up to the max, drawn at random between half that (its floor) and
// all of it, so that deliveries failing together do not come back together
// and none comes back sooner than its floor.
func (d *Dispatcher) backoff(n int) time.Duration {
	b := d.cfg.BackoffBase << min(n-1, 30)
	if b <= 0 || b > d.cfg.BackoffMax {
		b = d.cfg.BackoffMax
	}
	return b/2 + time.Duration(rand.Int64N(int64(b-b/2))+1)
}

// Collectors are the dispatcher's metrics: attempts by result and the
// delivery lag of this instance, and, read from Postgres at each scrape,
// the deliveries owed with the age of the oldest, the parked ones and the
// disabled endpoints.
func (d *Dispatcher) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.attempts, d.lag, &undelivered{pool: d.cfg.Pool,
		count: prometheus.NewDesc("tokend_webhook_undelivered", "Webhook deliveries not yet made (pending; parked ones are not counted).", nil, nil),
		age: prometheus.NewDesc("tokend_webhook_undelivered_oldest_age_seconds",
			"Age of the oldest pending webhook delivery; 0 when there is none.", nil, nil),
		parked: prometheus.NewDesc("tokend_webhook_parked",
			"Webhook deliveries parked while their endpoint is disabled; they resume when it is enabled.", nil, nil),
		disabled: prometheus.NewDesc("tokend_webhook_endpoints_disabled",
			"Webhook endpoints disabled, by an operator, by a 410 answer, or after failing for TOKEND_WEBHOOK_DISABLE_AFTER.", nil, nil)}}
}

type undelivered struct {
	pool                         *pgxpool.Pool
	count, age, parked, disabled *prometheus.Desc
}

func (u *undelivered) Describe(ch chan<- *prometheus.Desc) {
	ch <- u.count
	ch <- u.age
	ch <- u.parked
	ch <- u.disabled
}

func (u *undelivered) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := store.Undelivered(ctx, u.pool)
	if err != nil {
		return // left out of this scrape rather than reported wrong
	}
	ch <- prometheus.MustNewConstMetric(u.count, prometheus.GaugeValue, float64(c.Pending))
	ch <- prometheus.MustNewConstMetric(u.age, prometheus.GaugeValue, c.OldestAgeSeconds)
	ch <- prometheus.MustNewConstMetric(u.parked, prometheus.GaugeValue, float64(c.Parked))
	ch <- prometheus.MustNewConstMetric(u.disabled, prometheus.GaugeValue, float64(c.Disabled))
}
