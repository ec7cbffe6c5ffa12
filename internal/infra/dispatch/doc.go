// Package dispatch delivers token events to the webhook endpoints operators
// register, signed per Standard Webhooks (package webhook), at least once.
//
// A Dispatcher, run by `tokend serve` on every instance, loops over three
// steps, each a short transaction of its own:
//
//  1. it gives feed positions to settled events (package event) of every
//     tenant with an endpoint;
//  2. it fans out: each endpoint gets a delivery row for every event after
//     its feed position whose type it takes (parked by its flag while it is
//     disabled),
//     and its position moves past them, in one statement, so no event is
//     offered twice or skipped;
//  3. it claims due deliveries under a lock that serializes claims, handing
//     its workers out by tenants' shares (docs/webhooks.md), leasing each
//     for Config.Lease and counting the attempt, sends them outside any
//     transaction, and records each answer, fenced by the attempt number.
//
// Steps 1 and 2 run in a goroutine of their own beside step 3.
//
// One delivery is sent by one dispatcher at a time. A dispatcher that dies
// between sending and recording leaves a lease that runs out, and the
// delivery is sent again: at least once, never lost; consumers deduplicate by
// the event id (webhook.OnceTx). A failed attempt waits an exponential
// backoff with jitter; a delivery older than Config.MaxAge fails for good;
// an endpoint whose every attempt has failed for Config.DisableAfter is
// disabled, until an operator enables it again and redelivers.
package dispatch
