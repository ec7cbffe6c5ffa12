package inspect

import "github.com/tokend/tokend/internal/infra/store"

// ListStatement is the statement List runs for f, for plan tests.
func ListStatement(f Filter) string { return store.Statements().ListSQL[f.State] }
