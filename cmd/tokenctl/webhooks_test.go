package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestWebhooks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.ok("webhooks", "create", "https://hooks.example/tokend", "--types", "spend,revoke")
	id := regexp.MustCompile(`(?m)^id +(whe_\w+)$`).FindStringSubmatch(r.stdout)
	if id == nil || !regexp.MustCompile(`(?m)^secret +whsec_\S+ +\(shown once`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^event_types +revoke,spend$`).MatchString(r.stdout) {
		t.Fatalf("webhooks create:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "list"); !strings.Contains(r.stdout, id[1]) || strings.Contains(r.stdout, "whsec_") {
		t.Errorf("webhooks list:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "disable", id[1]); !regexp.MustCompile(`(?m)^enabled +false$`).MatchString(r.stdout) {
		t.Errorf("webhooks disable:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "enable", id[1]); !regexp.MustCompile(`(?m)^enabled +true$`).MatchString(r.stdout) {
		t.Errorf("webhooks enable:\n%s", r.stdout)
	}
	if r := f.ok("webhooks", "redeliver", id[1], "--all"); r.stdout != "redelivered 0\n" {
		t.Errorf("webhooks redeliver: %q", r.stdout)
	}
	f.ok("webhooks", "delete", id[1])
	f.fails(exitNotFound, "not_found", "webhooks", "get", id[1])
	f.fails(exitError, "invalid_request", "webhooks", "create", "ftp://hooks.example/")
	f.fails(exitUsage, "webhooks: want", "webhooks")
}
