package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
)

type feedPage struct {
	Items []struct {
		ID            string          `json:"id"`
		Position      int64           `json:"position"`
		Type          string          `json:"type"`
		TokenID       string          `json:"token_id"`
		Operation     string          `json:"operation"`
		Subject       string          `json:"subject"`
		Actor         string          `json:"actor"`
		Generation    int64           `json:"generation"`
		At            string          `json:"at"`
		From          *string         `json:"from_state"`
		To            string          `json:"to_state"`
		OutcomeStatus *int            `json:"outcome_status"`
		Outcome       json.RawMessage `json:"outcome"`
	} `json:"items"`
	NextCursor string `json:"next_cursor"`
	Epoch      string `json:"epoch"`
}

// readFeed follows key's feed from the start until it holds want events.
func (a *api) readFeed(t *testing.T, key string, want int) feedPage {
	t.Helper()
	var all feedPage
	cursor := "0"
	deadline := time.Now().Add(30 * time.Second)
	for len(all.Items) < want {
		if time.Now().After(deadline) {
			t.Fatalf("feed: %d of %d events after 30s: %+v", len(all.Items), want, all.Items)
		}
		res := a.get(key, "/v1/events?limit=2&after="+cursor)
		if res.status != http.StatusOK {
			t.Fatalf("GET /v1/events = %d %s", res.status, res.body)
		}
		var p feedPage
		mustUnmarshal(t, res.body, &p)
		all.Items = append(all.Items, p.Items...)
		cursor = p.NextCursor
		if len(p.Items) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	all.NextCursor = cursor
	return all
}

// TestEventFeed: the state changes of a tenant's tokens come out of
// GET /v1/events with what happened, to which token, and the stored status,
// each once; another tenant sees none of them.
func TestEventFeed(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tok := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	spend := fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":{"account":"acc_1","amount":5}}`, tok.Token)
	if res := a.post(key, "/v1/tokens/consume", spend); res.status != http.StatusOK {
		t.Fatalf("spend = %d %s", res.status, res.body)
	}
	a.post(key, "/v1/tokens/consume", spend) // a replay changes nothing

	feed := a.readFeed(t, key, 2)
	if len(feed.Items) != 2 {
		t.Fatalf("feed = %+v, want 2 events", feed.Items)
	}
	issued, spent := feed.Items[0], feed.Items[1]
	if issued.Type != "issued" || issued.From != nil || issued.To != "issued" || issued.TokenID != tok.ID ||
		issued.Operation != "ledger.credit" || issued.Subject != "user-1" || issued.Position != 1 {
		t.Errorf("first event = %+v, want the issue of %s at position 1", issued, tok.ID)
	}
	if spent.Type != "spend" || spent.From == nil || *spent.From != "issued" || spent.To != "consumed" ||
		spent.OutcomeStatus == nil || *spent.OutcomeStatus != http.StatusOK || spent.Position != 2 || spent.ID == issued.ID {
		t.Errorf("second event = %+v, want the spend, 200 stored, at position 2", spent)
	}
	if feed.NextCursor != "2" {
		t.Errorf("next_cursor = %q, want 2", feed.NextCursor)
	}
	// Past the end: nothing, and the same cursor to keep.
	res := a.get(key, "/v1/events?after=2")
	var end feedPage
	mustUnmarshal(t, res.body, &end)
	if res.status != http.StatusOK || len(end.Items) != 0 || end.NextCursor != "2" {
		t.Errorf("read past the end = %d %s, want no events and cursor 2", res.status, res.body)
	}
	// Another tenant's feed is its own.
	res = a.get(a.key("other", apikey.Client), "/v1/events")
	var other feedPage
	mustUnmarshal(t, res.body, &other)
	if res.status != http.StatusOK || len(other.Items) != 0 {
		t.Errorf("another tenant's feed = %d %s, want empty", res.status, res.body)
	}
}

// TestEventFeedLongPoll: with wait, a read with nothing new answers once an
// event comes, not after the whole wait.
func TestEventFeedLongPoll(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	got := make(chan response, 1)
	go func() { got <- a.get(key, "/v1/events?wait=30") }()
	time.Sleep(300 * time.Millisecond)
	a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	select {
	case res := <-got:
		var p feedPage
		mustUnmarshal(t, res.body, &p)
		if res.status != http.StatusOK || len(p.Items) != 1 || p.Items[0].Type != "issued" {
			t.Fatalf("long poll = %d %s, want the issue", res.status, res.body)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the long poll did not answer when the event came")
	}
}

func TestEventFeedRefusesBadQueries(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, q := range []string{"after=-1", "after=abc", "after=1.5", "limit=0", "limit=1001", "limit=x",
		"wait=31", "wait=-1", "wait=1s", "cursor=1", "after=1&after=2",
		"max_bytes=0", "max_bytes=-1", "max_bytes=1048577", "max_bytes=1e3", "max_bytes=1&max_bytes=2",
		"after=99999999999999999999", "limit=99999999999999999999", "wait=99999999999999999999", "max_bytes=99999999999999999999"} {
		wantProblem(t, a.get(a.client(), "/v1/events?"+q), http.StatusBadRequest, "invalid_request")
	}
	if res := a.get("", "/v1/events"); res.status != http.StatusUnauthorized {
		t.Errorf("without a key = %d, want 401", res.status)
	}
}

// TestEventFeedOutcomeOptIn: an operation declared with event_outcome puts
// the stored outcome body in its tokens' events, as spends replay it; one
// without shows none. Tokens keep the choice they were issued under.
func TestEventFeedOutcomeOptIn(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	spend := func(intentID string) issued {
		tok := a.issue(key, intentID, `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
		res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":{"account":"acc_1","amount":5}}`, tok.Token))
		if res.status != http.StatusOK {
			t.Fatalf("spend = %d %s", res.status, res.body)
		}
		tok.raw = res
		return tok
	}
	plain := spend("order-1") // issued before the opt-in
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/ledger.credit", key: op,
		body: `{"mode":"atomic","ignored_fields":["trace_id"],"event_outcome":true}`}); res.status != http.StatusOK || !strings.Contains(string(res.body), `"event_outcome":true`) {
		t.Fatalf("declare with event_outcome = %d %s", res.status, res.body)
	}
	opted := spend("order-2")

	var outcomes = map[string]string{}
	for _, e := range a.readFeedRaw(t, key, 4) {
		if e.Type == "spend" {
			outcomes[e.TokenID] = string(e.Outcome)
		}
	}
	if got := outcomes[plain.ID]; got != "null" {
		t.Errorf("spend event of a token issued without the opt-in: outcome %s, want null", got)
	}
	if got, want := outcomes[opted.ID], string(opted.raw.body); got != want {
		t.Errorf("spend event of an opted-in token: outcome %s, want the stored body %s", got, want)
	}
}

type rawFeedEvent struct {
	TokenID string          `json:"token_id"`
	Type    string          `json:"type"`
	Outcome json.RawMessage `json:"outcome"`
}

// readFeedRaw follows key's feed from the start until it holds want events.
func (a *api) readFeedRaw(t *testing.T, key string, want int) []rawFeedEvent {
	t.Helper()
	var all []rawFeedEvent
	cursor := "0"
	for deadline := time.Now().Add(30 * time.Second); len(all) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("feed: %d of %d events after 30s", len(all), want)
		}
		res := a.get(key, "/v1/events?after="+cursor)
		var p struct {
			Items      []rawFeedEvent `json:"items"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(res.body, &p); err != nil || res.status != http.StatusOK {
			t.Fatalf("GET /v1/events = %d %s", res.status, res.body)
		}
		all = append(all, p.Items...)
		cursor = p.NextCursor
		if len(p.Items) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return all
}
