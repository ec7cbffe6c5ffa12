package httpapi_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tokend/tokend/openapi"
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

// The error table of docs/api.md lists every status and code the API can
// send.
func TestDocsListEveryProblem(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "api.md"))
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
			t.Errorf("the API can answer %s; the error table of docs/api.md does not list it", p)
		}
	}
}

// TestOpenAPIServed checks GET /openapi.json answers the document, in JSON.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	res := a.get("", "/openapi.json")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if res.status != http.StatusOK || json.Unmarshal(res.body, &doc) != nil || doc.OpenAPI != "3.1.0" || doc.Paths["/v1/tokens"] == nil {
		t.Fatalf("GET /openapi.json = %d %.200s", res.status, res.body)
	}
}

// TestProblemTypesResolve checks that a problem's type is a page of this
// server, and that each documented code's page says what happened and what
// to do next.
func TestProblemTypesResolve(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	p := wantProblem(t, a.get(a.client(), "/v1/tokens/tok_missing"), http.StatusNotFound, "token_not_found")
	if p.Type != "/problems/token_not_found" {
		t.Errorf("type = %q, want /problems/token_not_found", p.Type)
	}
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	for code := range problems {
		res := a.get("", "/problems/"+code)
		page := string(res.body)
		if res.status != http.StatusOK || !strings.HasPrefix(res.header.Get("Content-Type"), "text/html") ||
			!strings.Contains(page, code) || !strings.Contains(page, "What to do next") {
			t.Errorf("GET /problems/%s = %d %s", code, res.status, page)
		}
	}
	wantProblem(t, a.get("", "/problems/no_such_code"), http.StatusNotFound, "not_found")
}
