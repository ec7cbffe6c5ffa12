package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestEventFeedRefusesACursorOfAnEarlierEpoch: every page names the feed's
// epoch. Once the feed has moved to a new epoch (a restore's rebase, here
// written into the head as one leaves it: epoch "e1" left at position 2), a
// cursor of the earlier epoch past 2 is a 409 cursor_epoch naming where to
// resume, however far the feed has grown; one at or below 2 reads on, in the
// new epoch; an epoch the feed never had resumes from 0; a cursor sent
// without an epoch is not checked; a malformed epoch is a 400.
func TestEventFeedRefusesACursorOfAnEarlierEpoch(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	writeEvents(t, a.pool, 5, 10)
	var first feedPage
	res := a.get(key, "/v1/events?after=0")
	mustUnmarshal(t, res.body, &first)
	if res.status != http.StatusOK || first.Epoch == "" {
		t.Fatalf("first page = %d %s, want 200 with an epoch", res.status, res.body)
	}
	if res := a.get(key, "/v1/events?after=5&epoch="+first.Epoch); res.status != http.StatusOK {
		t.Fatalf("cursor of the feed's own epoch = %d %s, want 200", res.status, res.body)
	}
	if _, err := a.pool.Exec(context.Background(), `
		UPDATE event_feed_heads
		SET prior_epochs = ARRAY['e1'], prior_bases = ARRAY[0::bigint], epoch = 'e2', epoch_base = 2
		WHERE tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query, resume string
	}{
		{"after=3&epoch=e1", "after=2&epoch=e2"},
		{"after=5&epoch=e1&wait=1", "after=2&epoch=e2"},
		{"after=9223372036854775807&epoch=e1", "after=2&epoch=e2"},
		{"after=1&epoch=e0", "after=0&epoch=e2"},
	} {
		p := wantProblem(t, a.get(key, "/v1/events?"+c.query), http.StatusConflict, "cursor_epoch")
		if !strings.Contains(p.Detail, c.resume) {
			t.Errorf("%s: detail %q does not say %s", c.query, p.Detail, c.resume)
		}
	}
	for _, q := range []string{"after=2&epoch=e1", "after=0&epoch=e1", "after=0&epoch=e0", "after=3&epoch=e2", "after=3"} {
		var page feedPage
		res := a.get(key, "/v1/events?"+q)
		mustUnmarshal(t, res.body, &page)
		if res.status != http.StatusOK || page.Epoch != "e2" || len(page.Items) == 0 {
			t.Errorf("%s = %d %s, want 200 with events in epoch e2", q, res.status, res.body)
		}
	}
	for _, q := range []string{"epoch=", "epoch=a%20b", "epoch=" + strings.Repeat("x", 65), "epoch=%00", "epoch=e1&epoch=e2"} {
		if q == "epoch=" {
			// Empty is no epoch.
			if res := a.get(key, "/v1/events?after=3&"+q); res.status != http.StatusOK {
				t.Errorf("%s = %d %s, want 200", q, res.status, res.body)
			}
			continue
		}
		wantProblem(t, a.get(key, "/v1/events?after=1&"+q), http.StatusBadRequest, "invalid_request")
	}
}
