package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tokend/tokend/client"
)

func inspectCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("inspect", "inspect <id>", "id")
	ids, err := c.parse(args)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	d, err := api.Inspect(ctx, ids[0])
	if err != nil {
		return err
	}
	return c.printRecord(d.Body, d.Record, d.Events)
}

func listCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("list", "list [--state S] [--operation O] [--subject S] [--limit N] [--cursor C] [--all]")
	var (
		state, operation, subject, cursor string
		limit                             int
		all                               bool
	)
	c.fs.StringVar(&state, "state", "", "only tokens in this state: issued, pending, consumed, failed, unknown, revoked or expired")
	c.fs.StringVar(&operation, "operation", "", "only tokens of this operation")
	c.fs.StringVar(&subject, "subject", "", "only tokens issued to this subject")
	c.fs.IntVar(&limit, "limit", 0, "tokens per page, 1 to 500 (default 50)")
	c.fs.StringVar(&cursor, "cursor", "", "start after the page that ended with this cursor")
	c.fs.BoolVar(&all, "all", false, "follow the cursors to the last page")
	if _, err := c.parse(args); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	// A limit out of range goes as it is: the API says why.
	f := client.Filter{State: client.State(state), Operation: operation, Subject: subject, Limit: limit, Cursor: cursor}
	type page struct {
		Items      []json.RawMessage `json:"items"`
		NextCursor *string           `json:"next_cursor"`
	}
	var (
		items   = []json.RawMessage{}
		records []client.Record
		next    *string
	)
	for p, err := range api.Pages(ctx, f) {
		if err != nil {
			return err
		}
		if c.json && !all {
			return c.printJSON(p.Body)
		}
		// The items as the API wrote them, for --json --all.
		var raw page
		if err := decode(p.Body, &raw); err != nil {
			return err
		}
		items, records, next = append(items, raw.Items...), append(records, p.Items...), p.NextCursor
		if !all {
			break
		}
	}
	if c.json {
		// Every page as one, the way the API would answer a page big enough.
		b, err := marshalJSON(page{Items: items})
		if err != nil {
			return err
		}
		return c.printJSON(b)
	}

	t := newTable(c.stdout)
	t.row("ID", "STATE", "OPERATION", "SUBJECT", "GENERATION", "CREATED", "EXPIRES")
	for _, r := range records {
		t.row(r.ID, r.State, r.Operation, r.Subject, r.Generation, r.CreatedAt, r.ExpiresAt)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(c.stderr, "tokenctl: more tokens follow: --cursor %s, or --all\n", *next)
	}
	return nil
}

func revokeCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("revoke", "revoke <id> --reason R", "id")
	var reason string
	c.fs.StringVar(&reason, "reason", "", "why, for the audit trail (required)")
	ids, err := c.parse(args)
	if err != nil {
		return err
	}
	if reason == "" {
		c.fs.Usage()
		return usagef("revoke: --reason is required")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	r, err := api.Revoke(ctx, ids[0], reason)
	if err != nil {
		return err
	}
	return c.printRecord(r.Body, *r, nil)
}

func reconcileCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("reconcile", "reconcile <id> --outcome succeeded|not_executed|failed [--status N] [--result JSON]", "id")
	var (
		req    client.Reconciliation
		result string
	)
	c.fs.StringVar(&req.Outcome, "outcome", "", "what happened downstream: succeeded, not_executed or failed (required)")
	c.fs.IntVar(&req.Status, "status", 0, "the HTTP status later spends get: a 2xx other than 204 and 205 for succeeded (default 200), a 4xx or 5xx for failed (default 422)")
	c.fs.StringVar(&result, "result", "", "the JSON later spends get: the result (succeeded) or the error (failed)")
	ids, err := c.parse(args)
	if err != nil {
		return err
	}
	if req.Outcome == "" {
		c.fs.Usage()
		return usagef("reconcile: --outcome is required")
	}
	if result != "" {
		if !json.Valid([]byte(result)) {
			return usagef("reconcile: --result is not valid JSON: %s", result)
		}
		req.Result = json.RawMessage(result)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	r, err := api.Reconcile(ctx, ids[0], req)
	if err != nil {
		return err
	}
	return c.printRecord(r.Body, *r, nil)
}

// printRecord prints an answer holding one token: as it came with --json,
// else as a list of fields followed by the audit trail, if it has one.
func (c *command) printRecord(body []byte, r client.Record, events []client.Event) error {
	if c.json {
		return c.printJSON(body)
	}
	t := newTable(c.stdout)
	t.row("id", r.ID)
	t.row("tenant", r.Tenant)
	t.row("operation", r.Operation)
	t.row("subject", r.Subject)
	t.row("intent_id", r.IntentID)
	t.row("state", r.State)
	t.row("generation", r.Generation)
	t.row("operation_id", r.OperationID)
	t.row("payload_digest", r.PayloadDigest)
	t.row("created_at", r.CreatedAt)
	t.row("expires_at", r.ExpiresAt)
	t.row("retain_until", r.RetainUntil)
	t.row("lease_expires_at", r.LeaseExpiresAt)
	t.row("finished_at", r.FinishedAt)
	t.row("result_status", r.ResultStatus)
	t.row("result_body", r.ResultBody)
	if err := t.Flush(); err != nil {
		return err
	}
	if events == nil {
		return nil
	}
	fmt.Fprintln(c.stdout)
	t = newTable(c.stdout)
	t.row("SEQ", "AT", "ACTOR", "KIND", "FROM", "TO", "GENERATION", "DETAIL")
	for _, ev := range events {
		t.row(ev.Seq, ev.At, ev.Actor, ev.Kind, ev.From, ev.To, ev.Generation, ev.Detail)
	}
	return t.Flush()
}

// decode reads an answer of the API into v.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("unexpected answer from the API: %w", err)
	}
	return nil
}
