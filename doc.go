// Package tokend is the front door of tokend embedded in a Go program: a
// one-time token for each business intent, whose spend runs the program's
// handler in the same Postgres transaction as the token's move, so the
// effect commits exactly once, and every repeat of the spend gets the stored
// outcome back. This page walks through embedding it; the packages it names
// hold the rest. A program that talks to a tokend server over HTTP uses
// package client instead, a module of its own (docs/embedding.md).
//
// The root package itself holds what the others share: the error every
// refused input comes as (InvalidInputError, read with errors.As).
//
// # The schema
//
// tokend keeps its tables in the program's database. Bring them to the
// newest schema at start, on a connection of their own, before anything
// else runs (migrations.ApplyURL connects, applies and disconnects):
//
//	if err := migrations.ApplyURL(ctx, databaseURL); err != nil { ... }
//
// # Adding an operation
//
// An operation is a name, a policy (operation.Policy) and the Go function
// that runs its effect. consume.RegisterFunc is the one way to add one: it
// declares the operation and types its payload in one call. The function
// gets the payload read into its T (checked by T's Validate method, if it has
// one, at issue as well as at spend) and runs in the spend's transaction, tx:
// whatever it writes there commits only if the token is consumed.
//
//	handlers := consume.NewRegistry()
//	consume.RegisterFunc(handlers, operation.Policy{Name: "wallet.credit"},
//		func(ctx context.Context, tx pgx.Tx, c consume.Call, in Credit) (consume.Outcome, error) {
//			// INSERT or UPDATE the program's own tables in tx ...
//			return consume.Outcome{Status: 200, Result: map[string]int64{"balance": balance}}, nil
//		})
//
// consume.Register, consume.RegisterBuiltin, consume.Func and
// consume.HandlerFunc are the lower level under it, for handlers that read
// their payloads themselves or operations each tenant declares itself.
//
// # The issuer and the spender
//
// One keyring (token.NewKeyring, from the server key) and one registry
// serve both: intent.NewIssuer issues tokens, consume.New spends them.
//
//	keys, err := token.NewKeyring(serverKey)
//	issuer := intent.NewIssuer(keys, intent.WithHandlers(handlers))
//	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
//
// # Issuing and spending
//
// Issue a token when the intent is made (rendering a form, creating an
// order), keyed by the program's own intent ID, so a repeated issue answers
// the same token. Hand the secret to whoever will spend it; spend it with
// the same operation, subject and payload. Spend owns its transaction;
// SpendTx runs in the caller's, beside the program's own writes, which then
// commit or roll back with the spend.
//
// # Handles
//
// Every function that writes has a ...Tx form taking a pgx.Tx, the caller's
// transaction. Reads take a db.DBTX: a pool, a connection or a transaction.
// A function that owns its transaction takes what begins one: a
// *pgxpool.Pool where it pipelines BEGIN with its first statement on a
// connection of its own (intent.Issuer.Issue, consume.Spender.Spend,
// consume.Finish, admin.Purge, the event feed's reads), a db.Beginner
// otherwise (admin.Revoke, admin.Reconcile, operation.Delete).
//
// # Operators and the feed
//
// Package admin revokes, reconciles and purges (admin.NewSweeper does the
// purging in the background); package inspect reads tokens; package event
// is the feed of every state change, in order, for a program that follows
// it; package webhook verifies tokend's webhooks.
//
// # Testing
//
// Package tokendtest gives each test a database of its own migrated to
// tokend's schema, and an issuer and a spender wired to the program's
// handlers (tokendtest.New).
package tokend
