package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tokend/tokend/client"
)

// table lays out rows in aligned columns; Flush writes them.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table {
	return &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
}

// row adds one row. Cells are printed with %v; an empty one shows as "-" so
// that every row has every column.
func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = cell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(s, "\t"))
}

func (t *table) Flush() error { return t.tw.Flush() }

// cell renders one value on one line: a tab or a newline in a subject or a
// stored result would break the layout.
func cell(v any) string {
	var s string
	switch v := v.(type) {
	case nil:
	case *string:
		if v != nil {
			s = *v
		}
	case *int:
		if v != nil {
			s = fmt.Sprint(*v)
		}
	case time.Time:
		s = v.UTC().Format(timeFormat)
	case *time.Time:
		if v != nil {
			s = v.UTC().Format(timeFormat)
		}
	case *client.State:
		if v != nil {
			s = string(*v)
		}
	case json.RawMessage:
		if string(v) != "null" {
			s = string(v)
		}
	default:
		s = fmt.Sprint(v)
	}
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
