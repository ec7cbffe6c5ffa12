package db_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

func TestRowError(t *testing.T) {
	missing := errors.New("missing")
	broken := errors.New("connection reset")
	cases := []struct {
		name    string
		err     error
		want    error // errors.Is target; nil for no error
		wantMsg string
	}{
		{"found", nil, nil, ""},
		{"no row", pgx.ErrNoRows, missing, "missing"},
		{"no row, wrapped", fmt.Errorf("scan: %w", pgx.ErrNoRows), missing, "missing"},
		{"other error", broken, broken, "inspect: get: connection reset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := db.RowError(c.err, missing, "inspect: get")
			if c.want == nil {
				if got != nil {
					t.Fatalf("RowError = %v, want nil", got)
				}
				return
			}
			if !errors.Is(got, c.want) || got.Error() != c.wantMsg {
				t.Errorf("RowError = %v, want %q wrapping %v", got, c.wantMsg, c.want)
			}
			if db.NoRow(got) {
				t.Errorf("RowError's answer %v still reads as pgx's no rows", got)
			}
		})
	}
}

func TestConnConfigLeavesPoolSettingsOut(t *testing.T) {
	cc, err := db.ConnConfig("postgres://u@127.0.0.1:5432/d?pool_max_conns=3&pool_min_conns=1&application_name=tokend&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	for k := range cc.RuntimeParams {
		if strings.HasPrefix(k, "pool_") {
			t.Errorf("run-time parameter %q would be sent to Postgres, which refuses it", k)
		}
	}
	if got := cc.RuntimeParams["application_name"]; got != "tokend" {
		t.Errorf("application_name = %q, want the URL's tokend kept", got)
	}
	if _, err := db.ConnConfig("postgres://u@h/d?pool_max_conns=lots"); err == nil {
		t.Error("a malformed pool setting was accepted")
	}
}
