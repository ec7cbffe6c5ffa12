package webhook_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/webhook"
)

// TestDocsCreateTheDedupTable: the consumer's guide in docs/events.md says
// to create the table OnceTx records event ids in: its SQL is
// webhook.Schema's, creates a table OnceTx works on in an empty database
// (where OnceTx alone fails), and the Go snippet runs webhook.Schema before
// it calls OnceTx.
func TestDocsCreateTheDedupTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "events.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	_, consumer, ok := strings.Cut(text, "On the consumer's side")
	if !ok {
		t.Fatal(`docs/events.md has no "On the consumer's side" section`)
	}
	sql := regexp.MustCompile("(?s)```sql\n(.*?)```").FindStringSubmatch(consumer)
	if sql == nil {
		t.Fatal("the consumer's section of docs/events.md gives no SQL for the dedup table")
	}
	words := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if words(sql[1]) != words(webhook.Schema) {
		t.Errorf("the SQL in docs/events.md:\n%s\nis not webhook.Schema:\n%s", sql[1], webhook.Schema)
	}
	goSnippet := regexp.MustCompile("(?s)```go\n(.*?)```").FindStringSubmatch(consumer)
	if goSnippet == nil {
		t.Fatal("the consumer's section of docs/events.md has no Go snippet")
	}
	schemaAt, onceAt := strings.Index(goSnippet[1], "webhook.Schema"), strings.Index(goSnippet[1], "webhook.OnceTx(")
	if schemaAt < 0 || onceAt < 0 || schemaAt > onceAt {
		t.Errorf("the Go snippet does not create the table (webhook.Schema) before it calls webhook.OnceTx:\n%s", goSnippet[1])
	}

	ctx := context.Background()
	pool := pgtest.NewPool(t)
	once := func() (bool, error) {
		var first bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			first, err = webhook.OnceTx(ctx, tx, "evt_docs")
			return err
		})
		return first, err
	}
	if _, err := once(); err == nil || !strings.Contains(err.Error(), "tokend_webhook_events") {
		t.Errorf("OnceTx without the table = %v; want the missing table named", err)
	}
	if _, err := pool.Exec(ctx, sql[1]); err != nil {
		t.Fatalf("the SQL of docs/events.md: %v", err)
	}
	for i, want := range []bool{true, false} {
		if first, err := once(); err != nil || first != want {
			t.Errorf("delivery %d: OnceTx = %v, %v; want %v", i+1, first, err, want)
		}
	}
}
