package httpapi_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// problemRE finds the status and code of every problem this package can
// answer with: Problem literals (Status: http.StatusX, Code: "c") and the
// rows of the sentinel error table ({err, http.StatusX, "c", ...}).
var problemRE = regexp.MustCompile(`http\.Status(\w+),\s*(?:Code:\s*)?"([a-z_]+)"`)

// statusByName maps net/http's constant names, StatusNotFound, to their codes.
func statusByName() map[string]int {
	m := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			m["Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text)] = code
		}
	}
	return m
}

// The README's error table lists every status and code the API can send.
func TestReadmeListsEveryProblem(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Rows of the table: | 404 | `token_not_found`, `other` | when |
	rowRE := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| (.*?) \\|")
	listed := map[string]bool{} // "404 token_not_found"
	for _, row := range rowRE.FindAllStringSubmatch(string(readme), -1) {
		for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[2], -1) {
			listed[row[1]+" "+c[1]] = true
		}
	}
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	names := statusByName()
	var sent []string
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range problemRE.FindAllStringSubmatch(string(src), -1) {
			status, ok := names["Status"+m[1]]
			if !ok {
				t.Fatalf("%s: http.Status%s is not a status net/http knows", f, m[1])
			}
			sent = append(sent, strconv.Itoa(status)+" "+m[2])
		}
	}
	slices.Sort(sent)
	sent = slices.Compact(sent)
	if len(sent) < 20 {
		t.Fatalf("found only %d problems in the sources (%v); the pattern no longer matches them", len(sent), sent)
	}
	for _, p := range sent {
		if !listed[p] {
			t.Errorf("the API can answer %s; the README's error table does not list it", p)
		}
	}
}

// ttl_seconds is required, as the README says: an issue without it, or with
// zero, is refused and issues nothing.
func TestIssueNeedsTTL(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tests := []struct{ name, body string }{
		{"absent", `{"operation":"ledger.credit","subject":"u"}`},
		{"null", `{"operation":"ledger.credit","subject":"u","ttl_seconds":null}`},
		{"zero", `{"operation":"ledger.credit","subject":"u","ttl_seconds":0}`},
	}
	for _, tt := range tests {
		res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: key, body: tt.body, header: http.Header{"Idempotency-Key": {"ttl-" + tt.name}}})
		if p := wantProblem(t, res, http.StatusBadRequest, "invalid_request"); !strings.Contains(p.Detail, "ttl_seconds") {
			t.Errorf("%s: detail %q should name ttl_seconds", tt.name, p.Detail)
		}
	}
	if n := a.count("tokens"); n != 0 {
		t.Errorf("%d tokens issued, want none", n)
	}
}
