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
	s, err := api.Stats(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(s.Body)
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
