package httpapi_test

import (
	"encoding/json"
	"io/fs"
	"maps"
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

// problemRE finds the status and code of every problem a package can
// answer with: Problem literals (Status: http.StatusX, Code: "c") and the
// rows of the sentinel error table ({err, http.StatusX, "c", ...}).
var problemRE = regexp.MustCompile(`http\.Status(\w+),\s*(?:Code:\s*)?"([a-z_]+)"`)

// rawProblemRE finds the problems of net/http's own refusals, whose status
// is the refusal's (rawerrors.go: case 431: p = Problem{Status: status, ...}).
var rawProblemRE = regexp.MustCompile(`case (\d{3}):\s*p = Problem\{Status: status, Code: "([a-z_]+)"`)

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

// answering are the packages besides this one that answer problems of
// their own, each with a word its rows of the error table must say: a
// code this package answers too ("404 not_found", no such route) needs a
// row of its own for that package's reason (no such webhook endpoint).
var answering = map[string]string{
	"internal/serve/webhookapi": "webhook",
}

// sentProblems scans every Go source of the module but tests (every
// package, internal/infra/dispatch and internal/serve/* included) for the
// problems it can answer, as "404 not_found", each with the packages that
// answer it.
func sentProblems(t *testing.T) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	names := statusByName()
	sent := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && rel != "." {
			// Other modules (cmd/tokend-load), the clients in other
			// languages, and what is not source.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || strings.HasPrefix(d.Name(), ".") ||
				d.Name() == "testdata" || d.Name() == "node_modules" || rel == "clients" || rel == "artifacts" {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, m := range problemRE.FindAllStringSubmatch(string(src), -1) {
			status, ok := names["Status"+m[1]]
			if !ok {
				t.Fatalf("%s: http.Status%s is not a status net/http knows", rel, m[1])
			}
			p := strconv.Itoa(status) + " " + m[2]
			sent[p] = append(sent[p], pkg)
		}
		for _, m := range rawProblemRE.FindAllStringSubmatch(string(src), -1) {
			p := m[1] + " " + m[2]
			sent[p] = append(sent[p], pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, pkgs := range sent {
		slices.Sort(pkgs)
		sent[p] = slices.Compact(pkgs)
	}
	return sent
}

// The error table of docs/api.md lists every status and code the API can
// send, from whichever package sends it, and so does the OpenAPI document.
func TestDocsListEveryProblem(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	// Rows of the table: | 404 | `token_not_found`, `other` | when |
	rowRE := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| (.*?) \\|(.*)$")
	listed := map[string]string{} // "404 token_not_found": what its rows say
	for _, row := range rowRE.FindAllStringSubmatch(string(readme), -1) {
		for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[2], -1) {
			listed[row[1]+" "+c[1]] += row[3] + "\n"
		}
	}
	documented, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	sent := sentProblems(t)
	// The pattern still reads the sources: the sentinel table, net/http's
	// refusals, and the webhook routes' own problems.
	for _, p := range []string{"404 token_not_found", "431 headers_too_large", "409 too_many_endpoints", "404 not_found"} {
		if _, ok := sent[p]; !ok {
			t.Fatalf("the scan of the sources did not find %s (it found %v); the pattern no longer matches them", p, slices.Sorted(maps.Keys(sent)))
		}
	}
	if len(sent) < 30 {
		t.Fatalf("found only %d problems in the sources (%v); the pattern no longer matches them", len(sent), slices.Sorted(maps.Keys(sent)))
	}
	for _, p := range slices.Sorted(maps.Keys(sent)) {
		rows, ok := listed[p]
		if !ok {
			t.Errorf("%v can answer %s; the error table of docs/api.md does not list it", sent[p], p)
			continue
		}
		for _, pkg := range sent[p] {
			word, ok := answering[pkg]
			switch {
			case pkg == "internal/serve/httpapi":
			case !ok:
				t.Errorf("%s answers %s: add it to answering, with the word its rows of the table say", pkg, p)
			case !strings.Contains(strings.ToLower(rows), word):
				t.Errorf("%s answers %s; no row of the error table of docs/api.md for it says %q", pkg, p, word)
			}
		}
		status, code, _ := strings.Cut(p, " ")
		doc, ok := documented[code]
		switch {
		case !ok:
			t.Errorf("%v can answer %s; the OpenAPI document's x-problems lacks it", sent[p], p)
		case strconv.Itoa(doc.Status) != status && p != "404 unknown_operation": // a 404 where the operation is the resource
			t.Errorf("%v can answer %s; the OpenAPI document's x-problems says %d", sent[p], p, doc.Status)
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
