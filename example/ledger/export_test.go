package ledger

// Statements are the ledger's statements, for the test that runs each.
var Statements = map[string]string{"credit": creditSQL, "debit": debitSQL, "balance": balanceSQL}
