package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"github.com/tokend/tokend/internal/infra/jsonread"
	"github.com/tokend/tokend/internal/serve/httpapi"
)

// TestIssueAndSpendReadThePayloadOnce counts the readings through
// internal/infra/jsonread of an issue and of a spend of a ledger.credit
// token with a payload: the body's decoding (1), which reads the payload
// and scans its numbers as it keeps it, then the payload digest's check (1),
// which also finds that no ignored member (trace_id) is there; the handler
// decodes the payload the digest has checked without checking it again. So
// two each. It was five each: the payload's own check while the body was
// decoded, a second reading of the canonical form to remove an absent
// trace_id, and the handler's own check.
func TestIssueAndSpendReadThePayloadOnce(t *testing.T) {
	cfg, key := benchConfig(t)
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	do := benchPost(t, srv, key)
	const payload = `{"account":"acct-1","amount":1}`
	for i, intent := range []string{"reads-1", "reads-2"} { // the first warms the caches
		before := jsonread.Reads()
		var tok struct{ Token string }
		if err := json.Unmarshal(do("/v1/tokens", intent,
			`{"operation":"ledger.credit","subject":"s","ttl_seconds":600,"payload":`+payload+`}`, http.StatusCreated), &tok); err != nil {
			t.Fatal(err)
		}
		issued := jsonread.Reads()
		do("/v1/tokens/consume", "", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"s","payload":`+payload+`}`, http.StatusOK)
		spent := jsonread.Reads()
		if i == 0 {
			continue
		}
		if n := issued - before; n != 2 {
			t.Errorf("an issue read JSON %d times; want 2 (the body, the digest's check)", n)
		}
		if n := spent - issued; n != 2 {
			t.Errorf("a spend read JSON %d times; want 2 (the body, the digest's check)", n)
		}
	}
}
