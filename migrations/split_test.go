package migrations

import (
	"io/fs"
	"strings"
	"testing"
)

// TestSplit cuts at semicolons outside quotes, dollar quotes and comments.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"A; B;", []string{"A", "B"}},
		{"-- c; d\nA;\n-- tail", []string{"-- c; d\nA"}},
		{"SELECT 'a;b'; SELECT \"x;\"", []string{"SELECT 'a;b'", "SELECT \"x;\""}},
		{"DO $x$ BEGIN a; b; END $x$; C", []string{"DO $x$ BEGIN a; b; END $x$", "C"}},
		{"CREATE FUNCTION f() AS $$ a; $$; SELECT $1;", []string{"CREATE FUNCTION f() AS $$ a; $$", "SELECT $1"}},
		{"A /* ; */; B", []string{"A /* ; */", "B"}},
	} {
		got := split(tc.in)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("split(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSplitMigrations: every migration file splits into statements that
// each start with a keyword, not inside a body or a string.
func TestSplitMigrations(t *testing.T) {
	names, _ := fs.Glob(files, "*.sql")
	for _, name := range names {
		b, _ := fs.ReadFile(files, name)
		sts := split(string(b))
		if len(sts) == 0 {
			t.Errorf("%s: no statements", name)
		}
		for _, s := range sts {
			body := s
			for strings.HasPrefix(body, "--") {
				_, body, _ = strings.Cut(body, "\n")
				body = strings.TrimSpace(body)
			}
			w := strings.ToUpper(strings.Fields(body)[0])
			switch w {
			case "CREATE", "ALTER", "DROP", "DO", "INSERT", "UPDATE", "DELETE", "COMMENT", "SELECT", "WITH", "REINDEX":
			default:
				t.Errorf("%s: statement starts with %q: %.80q", name, w, s)
			}
		}
	}
}
