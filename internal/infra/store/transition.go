package store

import (
	"cmp"
	"fmt"
	"strings"
)

// eventColumns are the token_events columns a transition writes, in the
// order Transition's SELECT fills them. xid is the token's event_xid, the
// latest xid of its events so far (migration 022), which the table's
// trigger keeps when it is later than the writer's own id: so that it need
// not read the token's last event.
const eventColumns = `xid, tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, detail, outcome_status, outcome_body`

// Event is what a transition records of each token it changed. Each field
// is an SQL expression over the changed rows (the columns u returns) or a
// parameter; an empty optional field is NULL.
type Event struct {
	Actor, Kind, From, To string
	Generation            string // default: u's generation
	Detail                string // jsonb
	OutcomeStatus         string
	OutcomeBody           string // bytea, already cut to what the token's policy lets events carry
}

// Transition is one statement that changes tokens and records an Event for
// each token changed.
type Transition struct {
	// With are the CTEs Change reads, "name AS (…)", in order.
	With []string
	// Change is the UPDATE, DELETE or INSERT on tokens, named u, RETURNING
	// event_xid, tenant_id, id, operation, subject and whatever Event and
	// Result read.
	Change string
	Event  Event
	// Result answers the statement, a SELECT over u and With. Empty: the
	// statement answers nothing, and its command tag counts the events.
	Result string
}

// SQL renders t.
func (t Transition) SQL() string {
	var b strings.Builder
	b.WriteString("WITH ")
	for _, w := range t.With {
		b.WriteString(w)
		b.WriteString(",\n")
	}
	fmt.Fprintf(&b, "u AS (\n%s\n)", strings.TrimSpace(t.Change))
	insert := "INSERT INTO token_events (" + eventColumns + ")\n" + t.Event.selectFrom("u")
	if t.Result == "" {
		b.WriteString("\n")
		b.WriteString(insert)
		return b.String()
	}
	fmt.Fprintf(&b, ", ev AS (\n%s\n)\n%s", insert, strings.TrimSpace(t.Result))
	return b.String()
}

// recordSQL is a statement that records e for each token where holds, read
// from the tokens table itself rather than from a change's RETURNING: an
// INSERT … SELECT from one tenant's tokens, which Citus runs on the worker
// holding the tenant, in the transaction's one phase.
//
// Its seq is 0, which the table's trigger (migrations 012, 014) replaces
// where the row is stored: the identity's default is a volatile function,
// which would send the statement through the Citus coordinator.
func recordSQL(where string, e Event) string {
	return "INSERT INTO token_events (seq, " + eventColumns + ") OVERRIDING SYSTEM VALUE\n" +
		strings.Replace(e.selectFrom("tokens"), "SELECT ", "SELECT 0, ", 1) + "\nWHERE " + where
}

// selectFrom renders the SELECT of e's values over the rows of from, which
// has the token columns event_xid, tenant_id, id, operation, subject and
// generation.
func (e Event) selectFrom(from string) string {
	null := func(s string) string { return cmp.Or(s, "NULL") }
	return fmt.Sprintf("SELECT event_xid, tenant_id, id, operation, subject, %s, %s, %s, %s, %s, %s, %s, %s FROM %s",
		e.Actor, e.Kind, null(e.From), e.To, cmp.Or(e.Generation, "generation"),
		null(e.Detail), null(e.OutcomeStatus), null(e.OutcomeBody), from)
}
