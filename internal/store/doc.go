// Package store holds the statements intent, consume and admin run on
// tokens: above all every statement that moves a token from one state to
// another, and the one text that records each move as an event
// (Transition). The audit trail and the event outbox are written in the
// statement that changes the token, so one commits exactly when the other
// does, and no caller can change a token without its event. Beside them are
// the locks and reads those moves start from, the sweep's deletes, and
// Pipelined, the transaction a pool-owning spend runs in.
//
// Every statement is constant text, or rendered at init from constant text:
// request data only ever reaches the database as parameters. Times are the
// database clock's, so every instance and the sweeper agree on them.
package store
