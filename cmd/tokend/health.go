package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// health asks a running tokend's /healthz, for a container HEALTHCHECK where
// no curl is installed: exit 0 when it answers 200, 1 otherwise. /healthz
// is liveness: the process serves; it checks no dependency, so a database
// outage does not mark every instance unhealthy at once, to be restarted
// for nothing. With --ready it asks /readyz instead (readiness: 200 while
// the database answers, Redis degraded or not), for a probe that takes an
// instance out of a load balancer. The address is TOKEND_LISTEN's, with an
// unspecified host (0.0.0.0, ::) asked on loopback.
func health(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var listen string
	var timeout time.Duration
	var ready bool
	bind := func(fs *flag.FlagSet, env envFlags) {
		fs.BoolVar(&ready, "ready", false, "ask /readyz (readiness) instead of /healthz (liveness)")
		fs.StringVar(&listen, "listen", defaultListen, "the address tokend serves on (env TOKEND_LISTEN)")
		fs.DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
		env["listen"] = "TOKEND_LISTEN"
	}
	if err := parseFlags("health", args, getenv, stderr, bind); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return usageError{fmt.Errorf("TOKEND_LISTEN %q: want host:port", listen)}
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	path := "/healthz"
	if ready {
		path = "/readyz"
	}
	url := "http://" + net.JoinHostPort(host, port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s", url, res.Status)
	}
	return nil
}
