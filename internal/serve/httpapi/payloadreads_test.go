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
// token with a payload: the body's decoding, which checks the payload as
// it is kept (2), then the payload digest's check (1). The digest's check
// also finds that no ignored member (trace_id) is there, and the handler
// decodes the payload the digest has checked without checking it again; so
// three each. It was five each: a second reading of the canonical form to
// remove an absent trace_id, and the handler's own check.
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
		if n := issued - before; n != 3 {
			t.Errorf("an issue read JSON %d times; want 3 (the body, its payload, the digest's check)", n)
		}
		if n := spent - issued; n != 3 {
			t.Errorf("a spend read JSON %d times; want 3 (the body, its payload, the digest's check)", n)
		}
	}
}
