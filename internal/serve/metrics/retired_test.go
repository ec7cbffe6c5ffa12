package metrics_test

import (
	"testing"

	"github.com/tokend/tokend/internal/serve/metrics"
)

// TestRetiredKeyRefusals: refusals for a retired server key are counted by
// action, both series exist at zero before the first one (so an alert sees
// it), and a value outside the set is "other", never a caller's value.
func TestRetiredKeyRefusals(t *testing.T) {
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const family = "tokend_retired_key_refusals_total"
	for _, a := range []string{"spend", "issue"} {
		if got, ok := value(scrape(t, m)[family], map[string]string{"action": a}); !ok || got != 0 {
			t.Fatalf("%s{action=%q} before any refusal = %v (found %v), want 0", family, a, got, ok)
		}
	}
	m.ObserveRetiredKey(metrics.RetiredKeySpend)
	m.ObserveRetiredKey(metrics.RetiredKeySpend)
	m.ObserveRetiredKey(metrics.RetiredKeyIssue)
	m.ObserveRetiredKey(metrics.RetiredKeyAction(secret))
	(*metrics.Metrics)(nil).ObserveRetiredKey(metrics.RetiredKeySpend) // no metrics: a no-op

	fams := scrape(t, m)
	for action, want := range map[string]float64{"spend": 2, "issue": 1, "other": 1} {
		if got, ok := value(fams[family], map[string]string{"action": action}); !ok || got != want {
			t.Errorf("%s{action=%q} = %v (found %v), want %v", family, action, got, ok, want)
		}
	}
}
