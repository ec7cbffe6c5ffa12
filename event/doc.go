// Package event is tokend's transactional outbox and the feed that reads it.
//
// Every state change of a token writes an event in the same transaction as
// the change (the audit trail is the outbox), so an event exists exactly when
// its change committed. Other systems read a tenant's events with [Read]
// (over HTTP: GET /v1/events) or receive them as webhooks, and deduplicate
// them by [Event.ID] in their own transaction.
//
// # Positions
//
// A feed read by a sequence number taken when the event was written would
// skip events: a transaction that took seq 10 and commits after one that
// took seq 11 has its event appear below a cursor a reader already moved past.
// So events get their feed position after commit. [Position] hands out
// positions, under a lock on the tenant's feed head, to the events whose
// transactions are settled: older than the oldest transaction still running
// (pg_snapshot_xmin). It takes them in the order of their transaction ids,
// then of seq, after a cursor kept in the head: every transaction below the
// horizon has ended and every later one has a greater id, so no event can
// show up later behind the cursor, and a position once handed out is never
// preceded by a new one. Positions are consecutive per tenant: 1, 2, 3, and
// so on.
//
// One token's changes are serialized by the token's row lock, but a
// transaction id is not a commit order: a transaction that took its id
// before it waited for the lock (an UPDATE takes it before it waits, and a
// sweeper batch or a caller's transaction around a Tx variant such as
// consume.Spender.SpendTx may have written before) can hold an older id than
// one that changed the token and committed before it. So an event's xid is
// the greater of its transaction's id and the xid of the token's event
// before it (migrations/020_feed_token_order.sql): along one token's events
// xid never decreases and seq increases, and the feed serves them in the
// order the lock gave them. The token's row carries that xid (event_xid,
// raised by a trigger on every change of the row, under its lock), and the
// record statements give it to the event, whose trigger keeps the later of
// it and its own id; an insert that gives none (the previous release's, a
// token from before migration 022) has the trigger read the token's last
// event instead (migrations/022_token_event_xid.sql). An xid is never below its writer's id, so the rest holds
// as said: an event settles only once its writer has ended.
//
// Positions live in a narrow table of their own (event_positions), so that
// giving one is an insert, not a second write of the event.
//
// An event waits for its position as long as the oldest transaction running
// on the Postgres server, in any of its databases (transaction ids are
// server-wide), so a long transaction anywhere delays the feed, but never
// makes it skip.
//
// # One Postgres and Citus
//
// Transaction ids and the horizon must come from one counter: the node's
// that stores the tenant's events. An event's xid is set by a trigger where
// the row is stored, and the horizon is read by a SELECT routed to the
// tenant (it reads only the tenant's rows); the statements that position
// take it as a parameter, since Citus evaluates the functions of a
// modification on the coordinator. On one Postgres this is the same thing.
//
// # Epochs
//
// A feed whose ids are not this node's (restored into another cluster, or
// its shards moved to another worker), or whose head was positioned on
// another node (the cluster's system identifier or WAL timeline differs:
// any pg_dump restore into another cluster, whatever its transaction
// counter, a point-in-time recovery, a standby's promotion), is rebased,
// and starts a new epoch at its head: positions above it may name other
// events than before the restore. [ReadPage] answers the epoch; a reader sends it back in
// [Query.Epoch], and a cursor of an earlier epoch past the position where
// the feed left it gets a [CursorEpochError] saying where to resume.
//
// # Retention
//
// Purging a token does not purge its events: it writes a last "purged" one.
// Events are deleted by the sweeper once their token is gone, they have a
// position, and they are older than the event retention
// (admin.DefaultEventRetention, TOKEND_EVENT_RETENTION).
package event
