package inspect

import "github.com/tokend/tokend/internal/infra/store"

// StateExpr is a token's state as of the database's now(): an issued token
// whose expiry has passed is expired, whether or not the sweeper has
// recorded it yet. Every read of a token's state goes through it, so that
// no read says issued while a spend says token_expired. It names the tokens
// table's columns unqualified.
const StateExpr = store.StateExpr

// Columns are a token record's columns, in the order Scan reads them, for
// statements elsewhere that return a token (RETURNING inspect.Columns). The
// state and finish time are as of the database's now() (StateExpr).
const Columns = store.Columns
