package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// envVarRE matches a tokend environment variable's name.
var envVarRE = regexp.MustCompile(`\bTOKEND_[A-Z0-9_]*[A-Z0-9]\b`)

// testOnly are variables of tests, test builds and scripts/run and
// scripts/test, not of a production tokend: the usage text need not list
// them.
var testOnly = []string{"TOKEND_TEST_", "TOKEND_FAKETIME_", "TOKEND_FUZZTIME", "TOKEND_PG_", "TOKEND_FORCE_THROWAWAY_", "TOKEND_ROBUSTNESS_"}

func envVars(text string) []string {
	var vars []string
	for _, v := range envVarRE.FindAllString(text, -1) {
		if !slices.ContainsFunc(testOnly, func(p string) bool { return strings.HasPrefix(v, p) }) {
			vars = append(vars, v)
		}
	}
	slices.Sort(vars)
	return slices.Compact(vars)
}

// The usage text and docs/configuration.md, the reference of every
// variable, name the same variables, so that neither can gain one the other
// lacks; a variable the README or another page names is one the usage text
// lists.
func TestUsageListsEveryDocumentedVariable(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	reference, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented, listed := envVars(string(reference)), envVars(usage)
	if len(documented) == 0 {
		t.Fatal("found no TOKEND_ variable in docs/configuration.md")
	}
	for _, v := range documented {
		if !slices.Contains(listed, v) {
			t.Errorf("docs/configuration.md documents %s; the usage text does not list it", v)
		}
	}
	for _, v := range listed {
		if !slices.Contains(documented, v) {
			t.Errorf("the usage text lists %s; docs/configuration.md does not document it", v)
		}
	}
	// Each is also explained, one line of its own, not just named in passing.
	for _, v := range listed {
		if !regexp.MustCompile(`(?m)^  ` + v + ` +\S`).MatchString(usage) {
			t.Errorf("the usage text has no line explaining %s", v)
		}
	}
	// The table of docs/configuration.md has a row for each, with its default.
	rowRE := regexp.MustCompile("(?m)^\\| `(TOKEND_[A-Z0-9_]+)` \\| [^|]+ \\| ")
	rows := map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(string(reference), -1) {
		rows[m[1]] = true
	}
	for _, v := range listed {
		if !rows[v] {
			t.Errorf("docs/configuration.md has no table row for %s", v)
		}
	}
	// Every other page names only variables tokend reads.
	for _, doc := range docPages(t, root) {
		if doc == filepath.Join("docs", "configuration.md") {
			continue
		}
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range envVars(string(text)) {
			// NAME_FILE is how any secret variable NAME is read from a file.
			if !slices.Contains(listed, v) && !slices.Contains(listed, strings.TrimSuffix(v, "_FILE")) {
				t.Errorf("%s names %s; the usage text does not list it", doc, v)
			}
		}
	}
}

// docPages are the user's documentation: README.md, SECURITY.md and every
// page under docs/, as paths relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs/*.md: %v, %v", pages, err)
	}
	docs := []string{"README.md", "SECURITY.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, rel)
	}
	return docs
}

// tokend migrate says whether it applied migrations, and how many.
func TestMigrateSaysWhatItDid(t *testing.T) {
	t.Parallel()
	// An empty database (on Citus, with the extension and the workers
	// registered: dropping a migrated schema would take Citus's own objects
	// with it).
	dbURL := pgtest.NewEmptyURL(t)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// tokend's migrations, then the example ledger's.
	var files []string
	for _, dir := range []string{"migrations", "example/ledger/migrations"} {
		f, err := filepath.Glob(filepath.Join("..", "..", dir, "*.sql"))
		if err != nil || len(f) == 0 {
			t.Fatalf("%s: %v, %v", dir, f, err)
		}
		files = append(files, f...)
	}
	env := func(k string) string {
		if k == "TOKEND_DATABASE_URL" {
			return dbURL
		}
		return ""
	}

	tests := []struct {
		name string
		want *regexp.Regexp
	}{
		{"empty database", regexp.MustCompile(`^tokend: applied ` + regexp.QuoteMeta(plural(len(files))) + `; schema up to date\n$`)},
		{"up to date", regexp.MustCompile(`^tokend: schema already up to date\n$`)},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"migrate"}, env, &stdout, &stderr); code != 0 || stdout.Len() != 0 || !tt.want.MatchString(stderr.String()) {
			t.Errorf("%s: migrate: exit %d, stdout %q, stderr %q; want exit 0 and stderr matching %s", tt.name, code, stdout.String(), stderr.String(), tt.want)
		}
	}
	var tokens int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM tokens`).Scan(&tokens); err != nil {
		t.Errorf("after migrate the schema lacks tokens: %v", err)
	}
}

func plural(n int) string {
	if n == 1 {
		return "1 migration"
	}
	return strconv.Itoa(n) + " migrations"
}

// The README and every page under docs/ name the tests that show what they
// say; each name must be a test that exists, so that a renamed or removed
// test does not leave a statement standing on nothing.
func TestDocsNameRealTests(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	funcRE := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+|Benchmark[A-Za-z0-9_]+|Fuzz[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".tokend" || d.Name() == "artifacts") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	nameRE := regexp.MustCompile(`\b(Test[A-Z][A-Za-z0-9_]*|Benchmark[A-Z][A-Za-z0-9_]*|Fuzz[A-Z][A-Za-z0-9_]*)\b`)
	for _, doc := range docPages(t, root) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range nameRE.FindAllString(string(text), -1) {
			if !defined[name] {
				t.Errorf("%s names %s; no test of that name exists", doc, name)
			}
		}
	}
}
