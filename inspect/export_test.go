package inspect

// ListStatement is the statement List runs for f, for plan tests.
func ListStatement(f Filter) string { return listSQL[f.State] }
