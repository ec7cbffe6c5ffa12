// Package store holds every statement that moves a token from one state to
// another, for intent, consume and admin, and the one text that records each
// move as an event (Transition): the audit trail and the event outbox are
// written in the statement that changes the token, so one commits exactly
// when the other does, and no caller can change a token without its event.
//
// Every statement is constant text, or rendered at init from constant text:
// request data only ever reaches the database as parameters. Times are the
// database clock's, so every instance and the sweeper agree on them.
package store
