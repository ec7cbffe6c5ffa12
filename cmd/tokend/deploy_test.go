package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfile: the image builds both commands statically (CGO off) with
// the Go version go.mod names, runs as a non-root user, and checks its
// health with tokend health, which needs no shell or curl, asking liveness
// (/healthz), not readiness.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod names no go version")
	}
	dockerfile := string(b)
	var stages []string
	for _, line := range strings.Split(dockerfile, "\n") {
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, line)
		}
	}
	if len(stages) != 2 || !strings.HasPrefix(stages[0], "FROM golang:"+string(goVersion[1])) {
		t.Errorf("want a golang:%s build stage and a runtime stage, got %q", goVersion[1], stages)
	}
	runtime := dockerfile[strings.LastIndex(dockerfile, "\nFROM "):]
	for _, want := range []string{"CGO_ENABLED=0 go build", "./cmd/tokend ./cmd/tokenctl", "-trimpath"} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("the build does not say %q", want)
		}
	}
	for _, want := range []string{"USER nonroot", `HEALTHCHECK`, `"/usr/local/bin/tokend", "health"`, `CMD ["serve"]`} {
		if !strings.Contains(runtime, want) {
			t.Errorf("the runtime stage does not say %q", want)
		}
	}
	if hc := runtime[strings.Index(runtime, "HEALTHCHECK"):]; strings.Contains(hc[:strings.Index(hc, "]")], "--ready") {
		t.Error("the HEALTHCHECK asks readiness: a database outage would mark every instance unhealthy at once")
	}
	if strings.Contains(runtime, "USER root") || strings.Contains(runtime, "USER 0") {
		t.Error("the runtime stage runs as root")
	}
}

// TestSystemdUnit: the unit migrates before serving, runs hardened without
// a fixed user, and its example environment names only variables tokend
// reads. systemd-analyze verifies it where it is installed.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	unit := filepath.Join("..", "..", "deploy", "tokend.service")
	settings := map[string]string{}
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			settings[k] = v
		}
	}
	for k, want := range map[string]string{
		"ExecStartPre": "/usr/local/bin/tokend migrate", "ExecStart": "/usr/local/bin/tokend serve",
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "Restart": "on-failure",
		"EnvironmentFile": "/etc/tokend/tokend.env",
	} {
		if settings[k] != want {
			t.Errorf("%s=%q, want %q", k, settings[k], want)
		}
	}

	env, err := os.ReadFile(filepath.Join("..", "..", "deploy", "tokend.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`(?m)^#?(TOKEND_[A-Z_]+)=`).FindAllStringSubmatch(string(env), -1) {
		if !strings.Contains(usage, name[1]+" ") {
			t.Errorf("tokend.env.example sets %s, which tokend does not read", name[1])
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: unit not verified by systemd")
		return
	}
	// verify wants the binaries and the environment file to exist.
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "/usr/local/bin/tokend", "/bin/true")
	text = strings.ReplaceAll(text, "EnvironmentFile=/", "EnvironmentFile=-/")
	copyPath := filepath.Join(t.TempDir(), "tokend.service")
	if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
