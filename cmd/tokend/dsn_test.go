package main

import (
	"strings"
	"testing"
)

// TestParseErrorsNeverQuoteAPassword: a database URL or keyword/value
// string that does not parse is refused naming the variable, with no
// spelling of its password in the error (pgx's own error quoted
// `PASSWORD=x` and `password = x` as written).
func TestParseErrorsNeverQuoteAPassword(t *testing.T) {
	for _, s := range []string{
		"host=x password = hunter2 port=abc",
		"host=x PASSWORD=hunter2 port=abc",
		"host=x Password =hunter2 sslmode=bogus",
		"host=x password='hunter2 and more' port=abc",
		"user=u password=hunter2 = x",
		"postgres://u:hunter2@h:bad/db",
		"postgres://u:hunter2@h/db?sslmode=bogus",
		"postgres://u:hun%74er2@h:bad/db",
		"postgres://u:hunter2@[::1/db",
	} {
		for _, c := range []dbConfig{{DatabaseURL: s}, {DatabaseURL: "postgres://h/db", SessionURL: s}} {
			err := c.Validate()
			if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "hun%74er2") || !strings.HasPrefix(err.Error(), "TOKEND_DATABASE_") {
				t.Errorf("%q: %v; want an error naming the variable without the password", s, err)
			}
		}
	}
}
