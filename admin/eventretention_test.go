package admin

import (
	"context"
	"testing"
	"time"

	feed "github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// TestPurgeKeepsEventsUntilTheirRetention: a purged token's events stay
// while they are within the event retention or have no feed position yet,
// and go once both have passed; a live token keeps its whole trail.
func TestPurgeKeepsEventsUntilTheirRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	gone := e.tokenIn(tenant, token.Revoked).Token.ID
	live := e.tokenIn(tenant, token.Issued).Token.ID
	e.age(gone)
	if n, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	trail := func(id string) int64 {
		return e.count(`SELECT count(*) FROM token_events WHERE tenant_id = $1 AND token_id = $2`, tenant, id)
	}
	kept := trail(gone)
	if kept < 2 {
		t.Fatalf("purged token has %d events, want its trail and a purged one", kept)
	}
	e.exec(`UPDATE token_events SET at = now() - interval '8 days'`)

	// Past retention but without a feed position: not offered yet, kept.
	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := trail(gone); n != kept {
		t.Fatalf("events without a position: %d left, want %d kept", n, kept)
	}

	// Positioned: a retention longer than their age keeps them...
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for e.count(`SELECT count(*) FROM token_events e WHERE NOT EXISTS (
		SELECT 1 FROM event_positions p WHERE p.tenant_id = e.tenant_id AND p.token_id = e.token_id AND p.seq = e.seq)`) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("events never got a feed position; %s", pgtest.Unsettled(e.pool))
		}
		if _, err := feed.Position(ctx, e.pool, tenant); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := Purge(ctx, e.pool, PurgeOptions{EventRetention: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if n := trail(gone); n != kept {
		t.Fatalf("within a 30-day retention: %d events left, want %d", n, kept)
	}
	// ...and the default retention (7 days) deletes them, but not the live
	// token's.
	liveTrail := trail(live)
	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := trail(gone); n != 0 {
		t.Errorf("past retention: %d events of the purged token left, want 0", n)
	}
	if n := trail(live); n != liveTrail || n == 0 {
		t.Errorf("live token: %d events left, want its %d", n, liveTrail)
	}
}

// TestPurgeDeletesFinishedDeliveries: webhook deliveries that finished
// longer ago than the event retention go, with their attempts; pending ones
// and recent ones stay.
func TestPurgeDeletesFinishedDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.exec(`INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
		VALUES ($1, 'whe_1', 'https://hooks.example/', '\x00', 'k', 0)`, tenant)
	for pos, row := range []struct {
		state string
		age   string
	}{{"delivered", "8 days"}, {"failed", "8 days"}, {"delivered", "1 hour"}, {"pending", "8 days"}} {
		e.exec(`INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, finished_at, created_at)
			VALUES ($1, 'whe_1', $2::bigint, 'evt_'||$2::text, $3::text, CASE WHEN $3::text <> 'pending' THEN now() - $4::interval END, now() - $4::interval)`,
			tenant, int64(pos+1), row.state, row.age)
		e.exec(`INSERT INTO webhook_attempts (tenant_id, endpoint_id, pos, attempt, duration_ms) VALUES ($1, 'whe_1', $2, 1, 5)`, tenant, int64(pos+1))
	}
	if _, err := Purge(ctx, e.pool, PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM webhook_deliveries`); n != 2 {
		t.Errorf("%d deliveries left, want the recent and the pending one", n)
	}
	if n := e.count(`SELECT count(*) FROM webhook_attempts`); n != 2 {
		t.Errorf("%d attempts left, want those of the 2 deliveries kept", n)
	}
	if n := e.count(`SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' OR finished_at > now() - interval '1 day'`); n != 2 {
		t.Errorf("the kept deliveries are not the pending and the recent one")
	}
}
