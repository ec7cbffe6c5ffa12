package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/tokend/tokend/client"
)

// defaultURL is where tokend listens by default.
const defaultURL = "http://127.0.0.1:8080"

// env is what every command runs with.
type env struct {
	getenv         func(string) string
	stdout, stderr io.Writer
}

// command is one command line being parsed: its flags, among them those
// every command takes.
type command struct {
	*env
	name     string // e.g. "operations put"
	fs       *flag.FlagSet
	operands []string // names of the operands, for usage messages
	url, key string   // --url and --key; the environment fills them when empty
	json     bool     // --json: print the API's answer as it is
}

// newCommand returns the command name taking operands, with the common flags
// bound. The caller binds its own flags on fs before calling parse.
func (e *env) newCommand(name, synopsis string, operands ...string) *command {
	c := &command{env: e, name: name, operands: operands, fs: flag.NewFlagSet("tokenctl "+name, flag.ContinueOnError)}
	c.fs.SetOutput(e.stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: tokenctl %s [--url URL] [--key KEY] [--json]\n", synopsis)
		c.fs.PrintDefaults()
	}
	// The defaults stay empty: -h prints them, and the key is a secret.
	c.fs.StringVar(&c.url, "url", "", "tokend's base URL (env TOKENCTL_URL; default "+defaultURL+")")
	c.fs.StringVar(&c.key, "key", "", "an operator API key (env TOKENCTL_KEY)")
	c.fs.BoolVar(&c.json, "json", false, "print the API's JSON instead of a table")
	return c
}

// parse parses args, where flags and operands may come in any order
// ("revoke tok_1 --reason R" or "revoke --reason R tok_1"), and returns the
// operands. Everything after "--" is an operand.
func (c *command) parse(args []string) ([]string, error) {
	var got []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err} // the flag package printed the usage
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			got = append(got, rest...)
			break
		}
		got, args = append(got, rest[0]), rest[1:]
	}
	if len(got) != len(c.operands) {
		c.fs.Usage()
		if len(got) > len(c.operands) {
			return nil, usagef("%s: unexpected argument %q", c.name, got[len(c.operands)])
		}
		return nil, usagef("%s: missing <%s>", c.name, c.operands[len(got)])
	}
	return got, nil
}

// client returns the API client the flags and the environment configure.
func (c *command) client() (*client.Client, error) {
	raw := cmp.Or(c.url, c.getenv("TOKENCTL_URL"), defaultURL)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, usagef("TOKENCTL_URL %q: want http://host:port or https://host[:port][/prefix]", raw)
	}
	key := cmp.Or(c.key, c.getenv("TOKENCTL_KEY"))
	if key == "" {
		return nil, usagef("TOKENCTL_KEY (or --key) is required: an operator API key, from `tokend keys create --role operator`")
	}
	return newClient(strings.TrimSuffix(u.String(), "/"), key, c.stderr)
}

// printJSON writes an answer of the API to stdout as it came, one per line.
// marshalJSON is json.Marshal without HTML escaping: tokenctl prints JSON
// for programs, never for a web page, and "<key>" must read "<key>", as the
// API sent it, not "\u003ckey\u003e".
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (c *command) printJSON(body []byte) error {
	if _, err := c.stdout.Write(body); err != nil {
		return err
	}
	if len(body) == 0 || body[len(body)-1] != '\n' {
		_, err := io.WriteString(c.stdout, "\n")
		return err
	}
	return nil
}
