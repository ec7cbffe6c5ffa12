// Package consume spends tokens. A spend locks the token, checks what it is
// bound to (tenant, subject, operation, expiry, payload digest), runs the
// operation's handler on the same transaction, stores the outcome and moves
// the token's state, so the business effect commits together with the spend
// or not at all. A repeated spend gets the stored outcome back.
//
// SpendTx runs inside a transaction the caller owns, next to the caller's
// own business update; Spend owns its transaction, which it begins with the
// lock and commits with the outcome, in three round trips in all.
package consume
