package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tokend/tokend/client"
)

const operationsUsage = `usage:
  tokenctl operations put <name> [--mode atomic|lease] [--on-lease-expiry unknown|takeover]
          [--lease-seconds N] [--max-ttl-seconds N] [--retention-seconds N] [--ignored-fields a,b]
  tokenctl operations list
  tokenctl operations get <name>
  tokenctl operations delete <name>
`

func operationsCmd(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, operationsUsage)
		return usagef("operations: want put, list, get or delete")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "put":
		return operationsPut(ctx, e, rest)
	case "list":
		return operationsList(ctx, e, rest)
	case "get":
		return operationsGet(ctx, e, rest)
	case "delete":
		return operationsDelete(ctx, e, rest)
	default:
		fmt.Fprint(e.stderr, operationsUsage)
		return usagef("operations %s: want put, list, get or delete", sub)
	}
}

// operationsPut declares an operation. A PUT replaces the whole policy:
// the flags left out take the API's defaults, not the previous values.
func operationsPut(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("operations put", "operations put <name> [--mode atomic|lease] [--on-lease-expiry unknown|takeover] [--lease-seconds N] [--max-ttl-seconds N] [--retention-seconds N] [--ignored-fields a,b]", "name")
	var (
		p       client.Policy
		ignored string
	)
	c.fs.StringVar(&p.Mode, "mode", "", "atomic (a Go handler in the server runs the effect) or lease (the effect happens elsewhere); default atomic if the server has a handler for the operation, else lease")
	c.fs.StringVar(&p.OnLeaseExpiry, "on-lease-expiry", "", "lease mode: what a lapsed lease becomes, unknown (an operator reconciles) or takeover (the next spender gets a new generation); default unknown")
	c.fs.IntVar(&p.LeaseSeconds, "lease-seconds", 0, "lease mode: how long a holder has to report (default 30)")
	c.fs.IntVar(&p.MaxTTLSeconds, "max-ttl-seconds", 0, "the longest ttl a token may be issued with (default 3600)")
	c.fs.IntVar(&p.RetentionSeconds, "retention-seconds", 0, "how long past expiry an intent is remembered (default 86400)")
	c.fs.StringVar(&ignored, "ignored-fields", "", "comma-separated payload fields left out of the digest, e.g. trace_id,meta.request_id")
	names, err := c.parse(args)
	if err != nil {
		return err
	}
	for f := range strings.SplitSeq(ignored, ",") {
		if f = strings.TrimSpace(f); f != "" {
			p.IgnoredFields = append(p.IgnoredFields, f)
		}
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	op, err := api.PutOperation(ctx, names[0], p)
	if err != nil {
		return err
	}
	return c.printPolicy(op)
}

func operationsList(ctx context.Context, e *env, args []string) error {
	c := e.newCommand("operations list", "operations list")
	if _, err := c.parse(args); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	list, err := api.Operations(ctx)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(list.Body)
	}
	t := newTable(c.stdout)
	t.row("NAME", "MODE", "ON_LEASE_EXPIRY", "LEASE_SECONDS", "MAX_TTL_SECONDS", "RETENTION_SECONDS", "IGNORED_FIELDS")
	for _, p := range list.Items {
		t.row(p.Name, p.Mode, p.OnLeaseExpiry, p.LeaseSeconds, p.MaxTTLSeconds, p.RetentionSeconds, strings.Join(p.IgnoredFields, ","))
	}
	return t.Flush()
}

func operationsGet(ctx context.Context, e *env, args []string) error {
	return operationsOne(ctx, e, "get", args, (*client.Client).GetOperation)
}

// operationsDelete removes a declaration. The server refuses it for a
// built-in operation and while the operation has unfinished tokens.
func operationsDelete(ctx context.Context, e *env, args []string) error {
	return operationsOne(ctx, e, "delete", args, (*client.Client).DeleteOperation)
}

// operationsOne runs a command that names one operation and prints the
// declaration call answers with.
func operationsOne(ctx context.Context, e *env, verb string, args []string,
	call func(*client.Client, context.Context, string) (*client.Operation, error)) error {
	c := e.newCommand("operations "+verb, "operations "+verb+" <name>", "name")
	names, err := c.parse(args)
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	op, err := call(api, ctx, names[0])
	if err != nil {
		return err
	}
	return c.printPolicy(op)
}

// printPolicy prints an answer holding one operation's policy.
func (c *command) printPolicy(p *client.Operation) error {
	if c.json {
		return c.printJSON(p.Body)
	}
	t := newTable(c.stdout)
	t.row("name", p.Name)
	t.row("mode", p.Mode)
	t.row("on_lease_expiry", p.OnLeaseExpiry)
	t.row("lease_seconds", p.LeaseSeconds)
	t.row("max_ttl_seconds", p.MaxTTLSeconds)
	t.row("retention_seconds", p.RetentionSeconds)
	t.row("ignored_fields", strings.Join(p.IgnoredFields, ","))
	return t.Flush()
}
