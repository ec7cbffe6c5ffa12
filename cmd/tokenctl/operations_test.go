package main

import (
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tokend/tokend/client"
)

func TestOperations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	var put client.Operation
	r := f.okJSON(&put, "operations", "put", "pay.card", "--mode", "lease", "--on-lease-expiry", "takeover", "--lease-seconds", "60",
		"--max-ttl-seconds", "120", "--retention-seconds", "30", "--ignored-fields", "trace_id, meta.request_id")
	want := client.Operation{Name: "pay.card", Policy: client.Policy{Mode: "lease", OnLeaseExpiry: "takeover", LeaseSeconds: 60, MaxTTLSeconds: 120, RetentionSeconds: 30,
		IgnoredFields: []string{"trace_id", "meta.request_id"}}}
	if !reflect.DeepEqual(put, want) {
		t.Errorf("operations put = %+v\nwant %+v", put, want)
	}
	if got := f.ok("operations", "get", "pay.card", "--json"); got.stdout != r.stdout {
		t.Errorf("operations get = %s, want what put answered, %s", got.stdout, r.stdout)
	}
	// The declaration is in force: a spend of pay.card is a lease.
	tok := f.issue("pay-1", `{"operation":"pay.card","subject":"alice","ttl_seconds":60}`)
	if status, b := f.spend(tok, "pay.card"); status != http.StatusAccepted {
		t.Errorf("spend of a lease operation = %d %s, want 202", status, b)
	}

	var list struct {
		Items []client.Operation `json:"items"`
	}
	f.okJSON(&list, "operations", "list")
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name+"/"+p.Mode)
	}
	if strings.Join(names, " ") != "ledger.credit/atomic ledger.debit/atomic pay.card/lease" {
		t.Errorf("operations list = %v", names)
	}

	// A table whose columns line up, whatever the widths of the cells.
	table := lines(f.ok("operations", "list").stdout)
	col := strings.Index(table[0], "MODE")
	if len(table) != 4 || col < 0 {
		t.Fatalf("operations list:\n%s", strings.Join(table, "\n"))
	}
	for _, l := range table[1:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row %q: the mode column does not start at %d:\n%s", l, col, strings.Join(table, "\n"))
		}
	}
	if r := f.ok("operations", "get", "pay.card"); !regexp.MustCompile(`(?m)^ignored_fields +trace_id,meta.request_id$`).MatchString(r.stdout) {
		t.Errorf("operations get:\n%s", r.stdout)
	}

	f.fails(exitNotFound, "unknown_operation", "operations", "get", "never.declared")
	f.fails(exitError, "invalid_request", "operations", "put", "Pay.Card", "--mode", "lease")
	f.fails(exitError, "operation_not_runnable", "operations", "put", "shop.order", "--mode", "atomic")
	f.fails(exitConflict, "builtin_operation", "operations", "put", "ledger.credit", "--mode", "lease")
	f.fails(exitUsage, "want put, list, get or delete", "operations")
	f.fails(exitUsage, "want put, list, get or delete", "operations", "remove", "pay.card")
}

func TestOperationsDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var put client.Operation
	f.okJSON(&put, "operations", "put", "pay.card") // no --mode: lease, as the server has no handler
	if put.Mode != "lease" {
		t.Fatalf("put without --mode declared %q, want lease", put.Mode)
	}
	tok := f.issue("pay-1", `{"operation":"pay.card","subject":"alice","ttl_seconds":60}`)
	f.fails(exitConflict, "operation_in_use", "operations", "delete", "pay.card")
	f.fails(exitConflict, "builtin_operation", "operations", "delete", "ledger.credit")
	f.fails(exitNotFound, "unknown_operation", "operations", "delete", "never.declared")
	f.fails(exitUsage, "", "operations", "delete")

	f.ok("revoke", tok.ID, "--reason", "test")
	var deleted client.Operation
	f.okJSON(&deleted, "operations", "delete", "pay.card")
	if deleted.Name != "pay.card" || deleted.Mode != "lease" {
		t.Errorf("operations delete = %+v, want the deleted pay.card", deleted)
	}
	f.fails(exitNotFound, "unknown_operation", "operations", "get", "pay.card")
}
