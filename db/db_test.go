package db_test

import (
	"errors"
	"fmt"
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
