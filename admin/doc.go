// Package admin holds what operators and the background sweeper do to tokens:
// revoke an issued token, reconcile a token whose outcome is unknown, expire
// and purge tokens past their expiry and retention, and count the tokens
// that are waiting for someone (pending or unknown).
//
// Every transition is a conditional UPDATE that records its audit event in
// the same statement, so a revoke racing a spend, or a reconcile racing a
// lease lapse, has exactly one winner and the loser is told the state that
// won. Pending and unknown tokens are never expired or purged: their outcome
// is still owed to someone, so they are counted by Unresolved instead.
//
// Functions ending in Tx run inside a transaction the caller owns; their
// counterparts without the suffix take a pool and own their transaction.
package admin
