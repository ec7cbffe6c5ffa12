package robust

import (
	"os"
	"testing"
	"time"
)

// The short pass: a few scenarios of a few seconds each, in the ordinary
// test run. Each checks the whole history, the feed and the ledger.
func TestShortPass(t *testing.T) {
	seed := Seed(t)
	for _, sc := range []Scenario{
		{Name: "kill9-x2", Instances: 2, Fault: Faults["kill9"]},
		{Name: "pg-restart-immediate", Instances: 1, Fault: Faults["pg-restart-immediate"]},
		{Name: "net-reset", Instances: 1, Fault: Faults["net-reset"]},
		{Name: "redis-old-snapshot-x2", Instances: 2, Fault: Faults["redis-old-snapshot"]},
		{Name: "pgbouncer-kill9", Instances: 1, Fault: Faults["pgbouncer-kill9"]}, // skips without pgbouncer
	} {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			Run(t, sc, 5*time.Second, seed)
		})
	}
}

// The long pass (scripts/robustness): every fault on one and on three
// instances, TOKEND_ROBUSTNESS_DURATION each (default 1m).
func TestLongPass(t *testing.T) {
	if os.Getenv("TOKEND_ROBUSTNESS_LONG") != "1" {
		t.Skip("the long pass runs with TOKEND_ROBUSTNESS_LONG=1 (scripts/robustness)")
	}
	d := time.Minute
	if s := os.Getenv("TOKEND_ROBUSTNESS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("TOKEND_ROBUSTNESS_DURATION=%q: %v", s, err)
		}
	}
	seed := Seed(t)
	t.Logf("seed %d (rerun with TOKEND_ROBUSTNESS_SEED=%d)", seed, seed)
	if why := pgbouncerMissing(); why != "" {
		t.Logf("skipped: %s", why)
	}
	for _, name := range FaultNames {
		for _, n := range []int{1, 3} {
			sc := Scenario{Name: name + "-x" + string(rune('0'+n)), Instances: n, Fault: Faults[name]}
			t.Run(sc.Name, func(t *testing.T) { Run(t, sc, d, seed) })
		}
		// The same fault with another database's load on the server.
		sc := Scenario{Name: name + "-x2-neighbours", Instances: 2, Fault: Faults[name], Neighbours: true}
		t.Run(sc.Name, func(t *testing.T) { Run(t, sc, d, seed) })
	}
}
