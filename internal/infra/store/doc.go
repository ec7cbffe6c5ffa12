// Package store holds the statements intent, consume and admin run on
// tokens: above all every statement that moves a token from one state to
// another, and the one text that records each move as an event
// (Transition). The audit trail and the event outbox are written in the
// statement that changes the token, so one commits exactly when the other
// does, and no caller can change a token without its event. Beside them are
// the locks and reads those moves start from, the sweep's deletes, and
// Pipelined, the transaction a pool-owning spend runs in.
//
// It also holds every other statement of tokend outside the migrations:
// the event feed's (event), token reads (inspect), operation policies, webhook
// endpoints and deliveries, API keys, console sign-outs, a webhook
// consumer's dedup, and the server's session checks. Each comes with a
// typed function that runs it and scans its rows into a row type of this
// package (the *_exec.go files); the packages that use them map the rows
// to their own types. pgx.ErrNoRows and SQLSTATEs (by pgerrcode's names,
// errors.go) are read here and nowhere else.
//
// The texts are unexported (Statements lists them for tests): callers pass
// typed parameters and get rows back. Every statement is constant text, or
// rendered at init from constant text: request data only ever reaches the
// database as parameters. Times are the
// database clock's, so every instance and the sweeper agree on them.
package store
