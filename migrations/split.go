package migrations

import "strings"

// split cuts a migration file into its statements, at semicolons outside
// quotes ('...', "..."), dollar quotes ($tag$...$tag$) and comments (--,
// /* */); empty statements are dropped. On Citus each statement is sent on
// its own: Citus forwards some DDL to the workers with the query string it
// was given, and a file sent as one string reaches them as a multi-command
// string they refuse.
func split(sql string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if s := strings.TrimSpace(sql[start:end]); s != "" && !onlyComments(s) {
			out = append(out, s)
		}
		start = end + 1
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(sql[i+1:], c)
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 1 // '' inside a string is two quoted runs: same result
			}
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = len(sql)
			} else {
				i += j
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			j := strings.Index(sql[i+2:], "*/")
			if j < 0 {
				i = len(sql)
			} else {
				i += j + 3
			}
		case c == '$':
			// $tag$ with tag empty or an identifier; $1 is a parameter.
			j := i + 1
			for j < len(sql) && (sql[j] == '_' || sql[j] >= 'a' && sql[j] <= 'z' || sql[j] >= 'A' && sql[j] <= 'Z' || j > i+1 && sql[j] >= '0' && sql[j] <= '9') {
				j++
			}
			if j < len(sql) && sql[j] == '$' {
				tag := sql[i : j+1]
				k := strings.Index(sql[j+1:], tag)
				if k < 0 {
					i = len(sql)
				} else {
					i = j + 1 + k + len(tag) - 1
				}
			}
		case c == ';':
			emit(i)
		}
	}
	if start < len(sql) {
		emit(len(sql))
	}
	return out
}

// onlyComments says whether s holds nothing but -- comments.
func onlyComments(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return false
		}
	}
	return true
}
