package clienttest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/event"
)

// TestFollowSeesEveryChange: Follow hands over each state change of a lease
// once, in order, waiting for the ones that come later.
func TestFollowSeesEveryChange(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	leaseOp(t, srv)
	c := newClient(t, srv.url, srv.client, &wire{})
	ctx, cancel := contextWithTimeout(t, time.Minute)
	defer cancel()

	tok, lease := leased(t, c, "order-1")
	want := []struct {
		typ string
		to  client.State
	}{{"issued", client.Issued}, {"lease", client.Pending}, {"complete", client.Consumed}}
	var got []client.FeedEvent
	for e, err := range c.Follow(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
		if len(got) == 2 {
			// Completed after the feed has been read up to here: Follow
			// waits for it.
			if _, err := lease.Complete(ctx, 0, map[string]string{"charge": "ch_1"}); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == len(want) {
			break
		}
	}
	for i, e := range got {
		if e.Type != want[i].typ || e.To != want[i].to || e.TokenID != tok.ID || e.Position != int64(i+1) {
			t.Errorf("event %d = %+v, want %s to %s of %s at %d", i, e, want[i].typ, want[i].to, tok.ID, i+1)
		}
	}
	if s := got[2].OutcomeStatus; s == nil || *s != http.StatusOK {
		t.Errorf("complete's outcome status = %v, want 200", s)
	}
	page, err := c.Events(ctx, client.EventsRequest{After: "3"})
	if err != nil || len(page.Items) != 0 || page.NextCursor != "3" {
		t.Errorf("Events after the last = %+v, %v; want none, cursor 3", page, err)
	}
	if _, err := c.Events(ctx, client.EventsRequest{After: "x"}); err == nil {
		t.Error("Events with a bad cursor: no error")
	}
}

// TestFollowGetsPastLargeEvents: a feed of 40 events of 1 MiB each, 40 MiB
// in all, more than the client reads of one answer (32 MiB), is followed to
// its end: pages are cut to the server's byte bound.
func TestFollowGetsPastLargeEvents(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	// A bound against a hang, not a speed check: under -race beside the
	// whole suite on two cores the 40 MiB took 55-63 s, past the minute
	// this had.
	ctx, cancel := contextWithTimeout(t, 4*time.Minute)
	defer cancel()
	const n, size = 40, 1 << 20
	if _, err := srv.pool.Exec(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
		SELECT 'acme', 'tok_' || g, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1, 200, convert_to($2, 'UTF8')
		FROM generate_series(1, $1::int) g`, n, `"`+strings.Repeat("x", size-2)+`"`); err != nil {
		t.Fatal(err)
	}
	for positioned := int64(0); positioned < n; {
		k, err := event.Position(context.Background(), srv.pool, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if positioned += k; k == 0 {
			time.Sleep(5 * time.Millisecond) // an older transaction elsewhere is open
		}
	}
	c := newClient(t, srv.url, srv.client, &wire{})
	got := 0
	for e, err := range c.Follow(ctx, "") {
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if got++; e.Position != int64(got) || len(e.Outcome) != size {
			t.Fatalf("event %d at position %d with %d outcome bytes", got, e.Position, len(e.Outcome))
		}
		if got == n {
			break
		}
	}
}
