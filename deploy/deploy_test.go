// Package deploy holds tokend's deployment files; its tests check them.
package deploy_test

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// object is the part of a Kubernetes object these tests read.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		MinAvailable int `yaml:"minAvailable"`
	} `yaml:"spec"`
}

type podSpec struct {
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		Name string `yaml:"name"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

// secretVariables are the variables tokend reads that hold a secret: in the
// manifests they must come from files (NAME_FILE), never from a value.
var secretVariables = []string{"TOKEND_SECRET_KEY", "TOKEND_PREVIOUS_SECRET_KEYS", "TOKEND_DATABASE_URL", "TOKEND_DATABASE_SESSION_URL", "TOKEND_REDIS_URL"}

// TestKubernetesManifests: the manifests parse, the migration Job runs
// `tokend migrate` with the Deployment's image, the Deployment has liveness
// on /healthz and readiness on /readyz, resource requests and a memory
// limit, reads every secret from a mounted file, names only variables
// tokend knows, and the Service and PodDisruptionBudget select its pods.
func TestKubernetesManifests(t *testing.T) {
	raw, err := os.ReadFile("k8s/tokend.yaml")
	if err != nil {
		t.Fatal(err)
	}
	usage, err := os.ReadFile("../cmd/tokend/main.go")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]object{}
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		byKind[o.Kind] = o
	}
	for _, k := range []string{"Job", "Deployment", "Service", "PodDisruptionBudget"} {
		if _, ok := byKind[k]; !ok {
			t.Fatalf("no %s in k8s/tokend.yaml (have %v)", k, slices.Sorted(maps.Keys(byKind)))
		}
	}
	job, dep := byKind["Job"], byKind["Deployment"]
	jc, dc := job.Spec.Template.Spec.Containers, dep.Spec.Template.Spec.Containers
	if len(jc) != 1 || len(dc) != 1 {
		t.Fatalf("want one container in the Job and in the Deployment, have %d and %d", len(jc), len(dc))
	}
	if !slices.Equal(jc[0].Args, []string{"migrate"}) || !slices.Equal(dc[0].Args, []string{"serve"}) {
		t.Errorf("Job args %v, Deployment args %v: want [migrate] and [serve]", jc[0].Args, dc[0].Args)
	}
	if jc[0].Image != dc[0].Image {
		t.Errorf("the Job migrates with %q but the Deployment runs %q", jc[0].Image, dc[0].Image)
	}
	c := dc[0]
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v: want GET /healthz (readiness fails while the database is down)", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v: want GET /readyz", c.ReadinessProbe)
	}
	for _, p := range []*probe{c.LivenessProbe, c.ReadinessProbe} {
		if p != nil && !slices.ContainsFunc(c.Ports, func(q struct {
			Name string `yaml:"name"`
		}) bool {
			return q.Name == p.HTTPGet.Port
		}) {
			t.Errorf("a probe uses port %q, which the container does not name", p.HTTPGet.Port)
		}
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	for _, ct := range []container{jc[0], c} {
		mounts := map[string]bool{}
		for _, m := range ct.VolumeMounts {
			mounts[m.MountPath] = true
		}
		for _, e := range ct.Env {
			base := strings.TrimSuffix(e.Name, "_FILE")
			if !bytes.Contains(usage, []byte(base)) {
				t.Errorf("%s: tokend's usage does not name %s", ct.Args, base)
			}
			if slices.Contains(secretVariables, e.Name) {
				t.Errorf("%s: %s is a secret: give it as %s_FILE from a mounted Secret", ct.Args, e.Name, e.Name)
			}
			if strings.HasSuffix(e.Name, "_FILE") && !mounts[path.Dir(e.Value)] {
				t.Errorf("%s: %s=%s is not under a mounted volume", ct.Args, e.Name, e.Value)
			}
		}
	}
	pod := dep.Spec.Template.Metadata.Labels
	for kind, sel := range map[string]map[string]string{
		"Deployment":          dep.Spec.Selector.MatchLabels,
		"PodDisruptionBudget": byKind["PodDisruptionBudget"].Spec.Selector.MatchLabels,
	} {
		if len(sel) == 0 || !subset(sel, pod) {
			t.Errorf("the %s selects %v, which the pods (%v) do not carry", kind, sel, pod)
		}
	}
	if pdb := byKind["PodDisruptionBudget"]; pdb.Spec.MinAvailable < 1 {
		t.Errorf("PodDisruptionBudget minAvailable %d: want at least 1", pdb.Spec.MinAvailable)
	}
}

// TestServiceSelectsThePods: the Service's selector, a plain map unlike the
// others' matchLabels, matches the Deployment's pods.
func TestServiceSelectsThePods(t *testing.T) {
	raw, err := os.ReadFile("k8s/tokend.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod, svc map[string]string
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var o struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Selector map[string]any `yaml:"selector"`
				Template struct {
					Metadata struct {
						Labels map[string]string `yaml:"labels"`
					} `yaml:"metadata"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Deployment":
			pod = o.Spec.Template.Metadata.Labels
		case "Service":
			svc = map[string]string{}
			for k, v := range o.Spec.Selector {
				s, _ := v.(string)
				svc[k] = s
			}
		}
	}
	if len(svc) == 0 || !subset(svc, pod) {
		t.Errorf("the Service selects %v, which the pods (%v) do not carry", svc, pod)
	}
}

// TestAlertRules: every rule has a name, an expression and a summary, and
// every tokend metric an expression names is one a running tokend serves on
// /metrics. Where promtool is installed, it checks the file too.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	metric := regexp.MustCompile(`\btokend_[a-z_]+\b`)
	used := map[string][]string{}
	rules := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, expr and a summary", r)
			}
			for _, m := range metric.FindAllString(r.Expr, -1) {
				used[m] = append(used[m], r.Alert)
			}
		}
	}
	if rules == 0 || len(used) == 0 {
		t.Fatalf("no rule naming a tokend metric in prometheus/alerts.yaml")
	}

	srv := proctest.Start(t, proctest.Options{DatabaseURL: pgtest.NewURL(t)})
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	served := map[string]bool{}
	for line := range strings.Lines(string(body)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			served[f[2]] = true
		}
	}
	for m, alerts := range used {
		if !served[m] {
			t.Errorf("alerts %v use %s, which tokend's /metrics does not serve", alerts, m)
		}
	}

	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yaml").CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed: the rules were parsed and their metric names checked, not evaluated")
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
