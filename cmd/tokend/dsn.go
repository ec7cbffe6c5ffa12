package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// dsnPassword finds a password in a keyword/value connection string, however
// it is spelled: password=x, PASSWORD = x, password='x y'.
var dsnPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// parseError is err, a parse error of the connection string s named name,
// as one line that quotes nothing of s: pgx redacts a password only where
// it spells it (password=, or a URL's), not PASSWORD=x or password = x. The
// reason is kept, with any password of s still in it replaced.
func parseError(name, s string, err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+len("`: "):]
	}
	var secrets []string
	for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
		secrets = append(secrets, m[1], strings.Trim(m[1], "'"))
	}
	if u, uerr := url.Parse(s); uerr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			secrets = append(secrets, p, url.PathEscape(p), url.QueryEscape(p))
		}
	}
	if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
		// A URL url.Parse refused: its user info, whatever it holds.
		secrets = append(secrets, s[i+3:j])
		if _, p, ok := strings.Cut(s[i+3:j], ":"); ok {
			secrets = append(secrets, p)
		}
	}
	for _, p := range secrets {
		if len(p) > 0 {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return fmt.Errorf("%s: cannot parse the connection string: %s", name, msg)
}
