package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/tokend/tokend/client"
)

const eventsUsage = `usage: tokenctl events tail [--after CURSOR] [--follow] [--url URL] [--key KEY] [--json]
`

func eventsCmd(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] != "tail" {
		fmt.Fprint(e.stderr, eventsUsage)
		return usagef("events: want tail")
	}
	return eventsTail(ctx, e, args[1:])
}

// eventsTail prints the tenant's token events after a cursor, one a line,
// up to the last one, or, with --follow, as they come until interrupted.
// The cursor to resume from goes to stderr at the end.
func eventsTail(ctx context.Context, e *env, args []string) (err error) {
	c := e.newCommand("events tail", "events tail [--after CURSOR] [--follow]")
	after := c.fs.String("after", "", "a cursor a previous tail printed; the first event kept when empty")
	follow := c.fs.Bool("follow", false, "keep waiting for new events until interrupted")
	if _, err := c.parse(args); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	cursor := *after
	print := func(ev client.FeedEvent) error {
		cursor = strconv.FormatInt(ev.Position, 10)
		if c.json {
			b, err := marshalJSON(ev)
			if err != nil {
				return err
			}
			return c.printJSON(b)
		}
		from := "-"
		if ev.From != nil {
			from = string(*ev.From)
		}
		status := ""
		if ev.OutcomeStatus != nil {
			status = strconv.Itoa(*ev.OutcomeStatus)
		}
		t := newTable(c.stdout)
		t.row(ev.Position, ev.At.Format("2006-01-02T15:04:05.000Z07:00"), ev.Type, ev.TokenID, from+"→"+string(ev.To), ev.Operation, ev.Subject, status)
		return t.Flush()
	}
	defer func() {
		if err == nil && cursor != "" {
			fmt.Fprintf(c.stderr, "next cursor: %s\n", cursor)
		}
	}()
	if *follow {
		for ev, err := range api.Follow(ctx, cursor) {
			if err != nil {
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return nil // interrupted: the normal end of a follow
				}
				return err
			}
			if err := print(ev); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		p, err := api.Events(ctx, client.EventsRequest{After: cursor, Limit: 500})
		if err != nil {
			return err
		}
		for _, ev := range p.Items {
			if err := print(ev); err != nil {
				return err
			}
		}
		if len(p.Items) == 0 {
			return nil
		}
	}
}
