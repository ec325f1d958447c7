package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

func TestSplice(t *testing.T) {
	doc := "# Title\n<!-- b -->\nold\nrows\n<!-- e -->\ntail\n"
	got, err := splice([]byte(doc), "<!-- b -->", "<!-- e -->", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Title\n<!-- b -->\nnew\n<!-- e -->\ntail\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{
		"no markers\n",
		"<!-- e -->\n<!-- b -->\n",
		"<!-- b -->\n<!-- b -->\n<!-- e -->\n",
		"<!-- b --> inline\n<!-- e -->\n",
	} {
		if _, err := splice([]byte(bad), "<!-- b -->", "<!-- e -->", "x\n"); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestPrometheusRuleKeepsTheGroupsAndTheirComments(t *testing.T) {
	rules := "# why\ngroups:\n  - name: g\n    rules:\n      # rationale\n      - alert: A\n\n        expr: up == 0\n"
	got, err := prometheusRule([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	spec := strings.SplitN(string(got), "\nspec:\n", 2)
	if len(spec) != 2 || spec[1] != "  groups:\n    - name: g\n      rules:\n        # rationale\n        - alert: A\n\n          expr: up == 0\n" {
		t.Errorf("got\n%s", got)
	}
	var obj struct {
		Kind string
		Spec struct {
			Groups []struct{ Name string }
		}
	}
	if err := yaml.Unmarshal(got, &obj); err != nil || obj.Kind != "PrometheusRule" || len(obj.Spec.Groups) != 1 {
		t.Errorf("decoded %+v, %v", obj, err)
	}
	if _, err := prometheusRule([]byte("  groups:\n")); err == nil {
		t.Error("a file without a top-level groups: was accepted")
	}
}

// generate writes every derived file, and a second run changes nothing.
func TestGenerateIsIdempotent(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "intro\n"+readmeBegin+"\n"+readmeEnd+"\nend\n")
	write("configs/watchdog.yaml", "scrape: {}\n"+configBegin+"\n"+configEnd+"\nalerts: {}\n")
	write("docs/configuration.md", "# Configuration\n"+docsBegin+"\n"+docsEnd+"\n## alerts\n")
	write(dashboard, `{"panels": []}`+"\n")
	write(chartRules, "# canonical\ngroups:\n  - name: g\n    rules: []\n")
	reg := detect.Registry()
	if err := generate(root, reg); err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := map[string]string{}
	for _, p := range []string{"README.md", "configs/watchdog.yaml", "docs/configuration.md", chartDashboard, plainRule} {
		first[p] = read(p)
	}
	if !strings.Contains(first["README.md"], "\n"+readmeBegin+"\n"+reg.ClassTable()+readmeEnd+"\nend\n") {
		t.Errorf("README.md:\n%s", first["README.md"])
	}
	if !strings.Contains(first["configs/watchdog.yaml"], configBegin+"\n"+reg.SettingsYAML()+configEnd+"\nalerts: {}\n") {
		t.Errorf("configs/watchdog.yaml:\n%s", first["configs/watchdog.yaml"])
	}
	if !strings.Contains(first["docs/configuration.md"], docsBegin+"\n"+reg.SettingsTables()+docsEnd+"\n## alerts\n") {
		t.Errorf("docs/configuration.md:\n%s", first["docs/configuration.md"])
	}
	if first[chartDashboard] != read(dashboard) {
		t.Errorf("the chart's dashboard is %q", first[chartDashboard])
	}
	if !strings.Contains(first[plainRule], "kind: PrometheusRule") || !strings.Contains(first[plainRule], "    - name: g\n") {
		t.Errorf("%s:\n%s", plainRule, first[plainRule])
	}
	if err := generate(root, reg); err != nil {
		t.Fatal(err)
	}
	for p, want := range first {
		if got := read(p); got != want {
			t.Errorf("a second run changed %s", p)
		}
	}
}
