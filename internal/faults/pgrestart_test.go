package faults

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/testkit/pgcluster"
	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/migrations"
)

// Postgres restarts while clients issue and spend tokens: `pg_ctl restart`
// in fast mode (sessions are terminated, the server checkpoints), then in
// immediate mode (a crash: no checkpoint, recovery from the WAL at start).
// It is a throwaway cluster of the test's own: the shared server is never
// touched. tokend is not restarted: it must answer 503 with Retry-After (or
// drop connections) while the database is away and recover by itself; after
// the clients' retries with the same intent ID and the same token, no effect
// is lost or duplicated.
func TestPostgresRestartMidLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := pgcluster.Start(t)
	dbURL := pg.URL("postgres")
	if err := migrations.ApplyURL(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})

	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) {
			tenant := "restart-" + mode
			c := newClient(t, srv.URL, proctest.CreateKey(t, dbURL, tenant, "client"))
			l := startLoad(ctx, t, c, 8)
			const before, after = 40, 40 // spends answered before the restart, and after it
			if !waitFor(ctx, func() bool { return l.answered.Load() >= before }) {
				t.Fatalf("only %d spends answered before the deadline", l.answered.Load())
			}
			restartAt := time.Now()
			if err := pg.Restart(mode); err != nil {
				t.Fatal(err)
			}
			pgBack := time.Since(restartAt)
			mark := l.answered.Load()
			recovered := waitFor(ctx, func() bool { return l.answered.Load() >= mark+after })
			l.stop()
			if !recovered {
				t.Errorf("only %d spends answered in the %v after the restart, want %d: tokend did not recover",
					l.answered.Load()-mark, time.Since(restartAt).Round(time.Second), after)
			}

			o := l.all.outage()
			t.Logf("pg_ctl restart -m %s took %v; the load had %d spends answered before it and %d after",
				mode, pgBack.Round(time.Millisecond), mark, l.answered.Load()-mark)
			t.Logf("outage seen by clients: %d answers to retry, first at +%v, last at +%v after the restart began; first final answer to a request sent after that at +%v (tokend not restarted)",
				o.failures, offset(restartAt, o.first), offset(restartAt, o.last), offset(restartAt, l.all.firstSuccessAfter(o.last)))
			t.Logf("client requests (issues and spends): %v", &l.all)
			if o.failures == 0 {
				t.Errorf("no client saw the restart: the load missed it, and this test proved nothing")
			}
			if o.without503RetryAfter > 0 {
				t.Errorf("%d answers 503 without Retry-After", o.without503RetryAfter)
			}
			for id, r := range l.told {
				if r.status != http.StatusOK {
					t.Errorf("token %s: final answer %s, want 200", id, r)
				}
			}
			checkExactlyOnce(ctx, t, dbURL, tenant, 1, l.told)
		})
	}
}

// load is clients issuing a token (ledger.credit, amount 1, an account per
// client) and spending it, each retried until final, over and over.
type load struct {
	all      tally
	answered atomic.Int64 // spends with a final answer
	done     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	mu   sync.Mutex
	told map[string]response // final spend answers by token id; read after stop
}

func startLoad(ctx context.Context, t *testing.T, c *client, clients int) *load {
	l := &load{done: make(chan struct{}), told: map[string]response{}}
	t.Cleanup(l.stop) // after the test's deferred cancel, should it end early
	for w := range clients {
		in := credit(fmt.Sprintf("c%d", w), 1)
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.done:
					return
				default:
				}
				if err := l.issueAndSpend(ctx, c, fmt.Sprintf("c%d-%d", w, n), in); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	return l
}

func (l *load) issueAndSpend(ctx context.Context, c *client, intentID string, in intent) error {
	r, as := untilDefinitive(ctx, func(ctx context.Context) response { return c.issue(ctx, intentID, in) })
	l.all.add(as)
	tok, err := r.issued()
	if err != nil {
		return fmt.Errorf("issue %s: %w", intentID, err)
	}
	r, as = untilDefinitive(ctx, func(ctx context.Context) response { return c.spend(ctx, tok.Token, in) })
	l.all.add(as)
	l.mu.Lock()
	l.told[tok.ID] = r
	l.mu.Unlock()
	l.answered.Add(1)
	return nil
}

// stop lets every client finish the token in hand, and waits for them.
func (l *load) stop() {
	l.stopOnce.Do(func() { close(l.done) })
	l.wg.Wait()
}
