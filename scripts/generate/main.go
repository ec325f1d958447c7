// Command generate writes the files, and the parts of files, that repeat
// another source, so that each has exactly one: `go generate ./...` runs it
// (the directive below), and CI fails when that changes a committed file.
//
//   - README.md, between its "detector classes" markers: the table of
//     incident classes, from detect.Registry().
//   - configs/watchdog.yaml, between its "detector settings" markers: the
//     detectors section with every default, from detect.Registry().
//   - docs/configuration.md, between its "detector settings" markers: a
//     table of each detector's settings, from detect.Registry().
//   - deploy/helm/sglang-watchdog/files/grafana-dashboard.json: a copy of
//     deploy/grafana/sglang-watchdog.json (Helm reads only files inside the
//     chart).
//   - deploy/kubernetes/monitoring/prometheusrule.yaml: the rule groups of
//     deploy/helm/sglang-watchdog/files/watchdog-rules.yaml in a
//     PrometheusRule.
//
// Usage, from the repository's root: go run ./scripts/generate
package main

//go:generate go run . -root ../..

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Marker lines around a generated block. Go's convention for a generated
// file ("Code generated ... DO NOT EDIT.") is for whole Go files; these
// blocks sit in hand-written Markdown and YAML.
const (
	readmeBegin = "<!-- BEGIN GENERATED: detector classes (go generate) -->"
	readmeEnd   = "<!-- END GENERATED: detector classes -->"
	configBegin = "# BEGIN GENERATED: detector settings (go generate)"
	configEnd   = "# END GENERATED: detector settings"
	docsBegin   = "<!-- BEGIN GENERATED: detector settings (go generate) -->"
	docsEnd     = "<!-- END GENERATED: detector settings -->"
)

const (
	dashboard      = "deploy/grafana/sglang-watchdog.json"
	chartDashboard = "deploy/helm/sglang-watchdog/files/grafana-dashboard.json"
	chartRules     = "deploy/helm/sglang-watchdog/files/watchdog-rules.yaml"
	plainRule      = "deploy/kubernetes/monitoring/prometheusrule.yaml"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := generate(*root, detect.Registry()); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

// generate rewrites every generated file under root that is not current.
func generate(root string, detectors detect.Catalog) error {
	at := func(path string) string { return filepath.Join(root, filepath.FromSlash(path)) }
	var errs []error
	errs = append(errs, rewrite(at("README.md"), func(b []byte) ([]byte, error) {
		return splice(b, readmeBegin, readmeEnd, detectors.ClassTable())
	}))
	errs = append(errs, rewrite(at("configs/watchdog.yaml"), func(b []byte) ([]byte, error) {
		return splice(b, configBegin, configEnd, detectors.SettingsYAML())
	}))
	errs = append(errs, rewrite(at("docs/configuration.md"), func(b []byte) ([]byte, error) {
		return splice(b, docsBegin, docsEnd, detectors.SettingsTables())
	}))
	errs = append(errs, derive(at(dashboard), at(chartDashboard), func(src []byte) ([]byte, error) { return src, nil }))
	errs = append(errs, derive(at(chartRules), at(plainRule), prometheusRule))
	return errors.Join(errs...)
}

// rewrite replaces the file at path with what edit makes of it, when that
// differs.
func rewrite(path string, edit func([]byte) ([]byte, error)) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := edit(old)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeIfChanged(path, old, out)
}

// derive writes dst as what transform makes of src, when that differs.
func derive(src, dst string, transform func([]byte) ([]byte, error)) error {
	in, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	out, err := transform(in)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	old, err := os.ReadFile(dst)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeIfChanged(dst, old, out)
}

func writeIfChanged(path string, old, out []byte) error {
	if bytes.Equal(old, out) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// splice replaces the lines between the marker lines begin and end of doc
// with block.
func splice(doc []byte, begin, end, block string) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	from, to := -1, -1
	for i, l := range lines {
		switch strings.TrimRight(l, "\r\n") {
		case begin:
			if from >= 0 {
				return nil, fmt.Errorf("%q appears twice", begin)
			}
			from = i
		case end:
			if to >= 0 {
				return nil, fmt.Errorf("%q appears twice", end)
			}
			to = i
		}
	}
	if from < 0 || to < 0 || to < from {
		return nil, fmt.Errorf("no block between a line %q and a line %q after it", begin, end)
	}
	var b strings.Builder
	for _, l := range lines[:from+1] {
		b.WriteString(l)
	}
	b.WriteString(block)
	if block != "" && !strings.HasSuffix(block, "\n") {
		b.WriteByte('\n')
	}
	for _, l := range lines[to:] {
		b.WriteString(l)
	}
	return []byte(b.String()), nil
}

// prometheusRuleHeader opens the plain PrometheusRule; the chart's rule
// groups follow under spec.
const prometheusRuleHeader = `# Alerts on sglang-watchdog itself (not on SGLang: the watchdog pages those).
#
# Generated by ` + "`go generate ./...`" + ` (scripts/generate) from
# deploy/helm/sglang-watchdog/files/watchdog-rules.yaml, the canonical rule
# file with the rationale of each rule: edit that file, not this one. Each
# alert has a severity label, summary and description annotations, and a
# runbook_url into deploy/README.md ("Alerts on the watchdog").
#
# The rules select job="sglang-watchdog" (the ServiceMonitor's Service name,
# or the PodMonitor's relabelled job).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sglang-watchdog
  labels:
    app.kubernetes.io/name: sglang-watchdog
spec:
`

// prometheusRule wraps a plain Prometheus rule file (comments, then a
// top-level "groups:") in a PrometheusRule: the groups, comments kept,
// indented under spec.
func prometheusRule(rules []byte) ([]byte, error) {
	_, groups, ok := bytes.Cut(rules, []byte("\ngroups:\n"))
	if !ok {
		return nil, errors.New(`no top-level "groups:" line`)
	}
	var b bytes.Buffer
	b.WriteString(prometheusRuleHeader)
	b.WriteString("  groups:\n")
	for _, l := range bytes.SplitAfter(groups, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			b.WriteString("  ")
		}
		b.Write(l)
	}
	return b.Bytes(), nil
}
