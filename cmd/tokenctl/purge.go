package main

import (
	"context"
	"fmt"

	"github.com/tokend/tokend/client"
)

// purgeCmd repeats POST /v1/admin/purge until a round purges nothing. Each
// request purges a bounded number of tokens, so that no request runs for
// long; a large backlog takes many rounds, and each prints the running total
// to stderr.
func purgeCmd(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("purge", "purge")
	if _, err := c.parse(args); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	var total int64
	for round := 1; ; round++ {
		r, err := api.Purge(ctx)
		if err != nil && total > 0 {
			// What was purged stays purged; say how much that was.
			return fmt.Errorf("purge: stopped in round %d, %d purged: %w", round, total, err)
		}
		if err != nil {
			return err
		}
		if r.Purged == 0 {
			break
		}
		total += r.Purged
		fmt.Fprintf(c.stderr, "tokenctl: purge: round %d: %d purged, %d in all\n", round, r.Purged, total)
	}
	if c.json {
		b, err := marshalJSON(client.Purged{Purged: total})
		if err != nil {
			return err
		}
		return c.printJSON(b)
	}
	_, err = fmt.Fprintf(c.stdout, "purged %d\n", total)
	return err
}
