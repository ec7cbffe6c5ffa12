package main

import (
	"context"
	"time"
)

// statsCmd prints how many of the tenant's tokens wait for someone: pending
// ones for their lease holder, unknown ones for an operator. Nothing expires
// or purges them, so these are the numbers to watch.
func statsCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("stats", "stats")
	if _, err := c.parse(args); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	body, err := api.get(ctx, "/v1/admin/stats")
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(body)
	}
	var s struct {
		Pending                 int64 `json:"pending"`
		Unknown                 int64 `json:"unknown"`
		OldestPendingAgeSeconds int64 `json:"oldest_pending_age_seconds"`
		OldestUnknownAgeSeconds int64 `json:"oldest_unknown_age_seconds"`
	}
	if err := decode(body, &s); err != nil {
		return err
	}
	t := newTable(c.stdout)
	t.row("pending", s.Pending)
	t.row("unknown", s.Unknown)
	t.row("oldest_pending_age", age(s.Pending, s.OldestPendingAgeSeconds))
	t.row("oldest_unknown_age", age(s.Unknown, s.OldestUnknownAgeSeconds))
	return t.Flush()
}

// age renders an age in seconds as a duration, or nothing when no token has it.
func age(tokens, seconds int64) string {
	if tokens == 0 {
		return ""
	}
	return (time.Duration(seconds) * time.Second).String()
}
