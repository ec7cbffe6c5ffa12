package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// version is the release this build is, set at link time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/tokend
//
// Without it, tokend version reports what the Go toolchain recorded: the
// module's version and, when built from a checkout, the commit.
var version string

// buildVersion describes this build in one line.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "tokend " + cmp.Or(version, "(unknown)")
	}
	v := cmp.Or(version, info.Main.Version, "(devel)")
	var extra []string
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += "+modified"
		}
		extra = append(extra, "commit "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		extra = append(extra, t)
	}
	extra = append(extra, info.GoVersion)
	return fmt.Sprintf("tokend %s (%s)", v, strings.Join(extra, ", "))
}

func printVersion(stdout io.Writer) error {
	_, err := fmt.Fprintln(stdout, buildVersion())
	return err
}
