// Command tokenctl is the operator's command line for tokend: it inspects,
// lists, revokes and reconciles tokens, purges those past their retention,
// declares operations and reports the tokens waiting for someone. It talks to
// tokend's REST API with an operator API key.
//
// Usage:
//
//	tokenctl inspect <id>
//	tokenctl list [--state S] [--operation O] [--subject S] [--limit N] [--cursor C] [--all]
//	tokenctl revoke <id> --reason R
//	tokenctl reconcile <id> --outcome succeeded|not_executed|failed [--status N] [--result JSON]
//	tokenctl purge
//	tokenctl operations put <name> [--mode atomic|lease] [--on-lease-expiry unknown|takeover]
//	        [--lease-seconds N] [--max-ttl-seconds N] [--retention-seconds N] [--ignored-fields a,b]
//	tokenctl operations list
//	tokenctl operations get <name>
//	tokenctl operations delete <name>
//	tokenctl stats
//	tokenctl events tail [--after CURSOR] [--follow]
//	tokenctl webhooks create|list|stats|get|enable|disable|delete|rotate-secret|redeliver …
//
// Every command takes --url (env TOKENCTL_URL, default http://127.0.0.1:8080),
// --key (env TOKENCTL_KEY, required) and --json, which prints the API's JSON
// instead of a table. These three may come before the command; a command's
// flags may come before or after its arguments. While tokend does not
// answer, a command retries for up to 15 s and says so on stderr at once.
//
// Exit status: 0 on success, 2 for a usage error, 3 when the token or
// operation is not found, 4 on a conflict with the token's or operation's state, 5 when the
// key is refused, 1 for anything else. Errors go to stderr with the API's
// problem code and detail.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/tokend/tokend/client"
)

const usage = `usage: tokenctl [--url URL] [--key KEY] [--json] <command> [arguments]
       (the three flags may also come after the command)

commands:
  inspect <id>                          a token, all of it, with its audit trail
  list [--state S] [--operation O] [--subject S] [--limit N] [--cursor C] [--all]
                                        tokens, newest first; --all follows every page
  revoke <id> --reason R                revoke an issued token
  reconcile <id> --outcome succeeded|not_executed|failed [--status N] [--result JSON]
                                        settle a token whose outcome is unknown
  purge                                 delete finished tokens past their retention, until none is left
  operations put <name> [--mode atomic|lease] [--on-lease-expiry unknown|takeover]
          [--lease-seconds N] [--max-ttl-seconds N] [--retention-seconds N] [--ignored-fields a,b]
                                        declare an operation (replaces its policy for tokens issued from now on)
  operations list                       the declared operations
  operations get <name>                 one operation's policy
  operations delete <name>              remove a declaration no unfinished token needs
  stats                                 pending and unknown tokens, and the oldest of each
  events tail [--after CURSOR] [--follow]
                                        the tenant's token events after a cursor, one a line;
                                        --follow waits for new ones
  webhooks create <endpoint-url> [--types a,b] | list | stats | get <id> | enable <id> | disable <id> | delete <id>
          | rotate-secret <id> [--overlap 24h]
          | redeliver <id> [--after POSITION] [--position POSITION] [--all] [--delivered]
                                        webhook endpoints; create and rotate-secret print the signing
                                        secret, once (tokenctl webhooks --help says more)

environment: TOKENCTL_URL (default http://127.0.0.1:8080), TOKENCTL_KEY (an operator key, or a client key for events; required)
exit status: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, 5 key refused
`

// Exit statuses.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitConflict = 4
	exitAuth     = 5
)

func main() {
	// An interrupt cancels the request in flight: a purge stops between
	// batches, keeping what it deleted.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// usageError is a mistake in the command line or the environment.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run runs the command line args and returns the exit status. Only a
// command's result goes to stdout; errors and progress go to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, &env{getenv: getenv, stdout: stdout, stderr: stderr})
	code := exitCode(err)
	var p *client.Problem
	msg, noAnswer := unreachable(err)
	switch {
	case code == exitOK:
	case errors.As(err, &p) && err == error(p):
		// The API's words, and the id its log has them under.
		fmt.Fprintf(stderr, "tokenctl: %s: %s (HTTP %d, request %s)\n", p.Code, p.Detail, p.Status, p.RequestID)
	case noAnswer:
		fmt.Fprintf(stderr, "tokenctl: %s\n", msg)
	default:
		fmt.Fprintf(stderr, "tokenctl: %v\n", err)
	}
	return code
}

// commands are tokenctl's commands by name.
var commands = map[string]func(ctx context.Context, e *env, args []string) error{
	"inspect":    inspectCmd,
	"list":       listCmd,
	"revoke":     revokeCmd,
	"reconcile":  reconcileCmd,
	"purge":      purgeCmd,
	"operations": operationsCmd,
	"stats":      statsCmd,
	"events":     eventsCmd,
	"webhooks":   webhooksCmd,
}

func dispatch(ctx context.Context, args []string, e *env) error {
	args, err := hoistGlobalFlags(args)
	if err != nil {
		fmt.Fprint(e.stderr, usage)
		return err
	}
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return usagef("no command given")
	}
	name, rest := args[0], args[1:]
	if isHelp(name) {
		fmt.Fprint(e.stdout, usage)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprint(e.stderr, usage)
		return usagef("unknown command %q", name)
	}
	if help, ok := groupUsage[name]; ok && len(rest) > 0 && isHelp(rest[0]) {
		fmt.Fprint(e.stdout, help)
		return nil
	}
	return cmd(ctx, e, rest)
}

func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// groupUsage is the help of the commands that take a subcommand.
var groupUsage = map[string]string{
	"operations": operationsUsage,
	"events":     eventsUsage,
	"webhooks":   webhooksUsage,
}

// globalFlags are the flags every command takes, and whether each takes a value.
var globalFlags = map[string]bool{"url": true, "key": true, "json": false}

// hoistGlobalFlags moves the global flags written before the command
// ("tokenctl --url U stats") to just after the command and its subcommand,
// where every command parses them.
func hoistGlobalFlags(args []string) ([]string, error) {
	var globals []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		takesValue, ok := globalFlags[name]
		if !ok || args[0] == "--" {
			return nil, usagef("unknown flag %q before the command; flags of a command go after it", args[0])
		}
		n := 1
		if takesValue && !hasValue {
			if len(args) < 2 {
				return nil, usagef("flag %s needs a value", args[0])
			}
			n = 2
		}
		globals, args = append(globals, args[:n]...), args[n:]
	}
	if len(globals) == 0 || len(args) == 0 {
		return args, nil
	}
	at := 1
	if _, group := groupUsage[args[0]]; group && len(args) > 1 {
		at = 2
	}
	return slices.Concat(args[:at], globals, args[at:]), nil
}

// exitCode is the exit status err calls for. Answers of the API are told
// apart by status, so that scripts can branch without parsing stderr.
func exitCode(err error) int {
	var (
		ue usageError
		ae *client.Problem
	)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ae):
		switch ae.Status {
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusConflict:
			return exitConflict
		case http.StatusUnauthorized, http.StatusForbidden:
			return exitAuth
		}
	}
	return exitError
}
