// Command extract-rules writes the rule groups of every PrometheusRule in the
// given Kubernetes YAML files (multi-document streams, e.g. `helm template`
// output) as one plain Prometheus rule file, for `promtool check rules` and
// `promtool test rules`.
//
//	go run ./scripts/extract-rules -o rules.yaml deploy/kubernetes/monitoring/prometheusrule.yaml
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sglang-watchdog/sglang-watchdog/scripts/internal/manifest"
)

func main() {
	manifest.Main("extract-rules", "extract-rules [-o rules.yaml] manifest.yaml...",
		func(n int) bool { return n > 0 }, extract)
}

// extract collects spec.groups of every PrometheusRule in files.
func extract(files []string) ([]byte, error) {
	var groups []any
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		gs, err := fromStream(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		groups = append(groups, gs...)
	}
	if len(groups) == 0 {
		return nil, errors.New("no PrometheusRule with rule groups found")
	}
	return yaml.Marshal(map[string]any{"groups": groups})
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Groups []any `json:"groups"`
	} `json:"spec"`
}

func fromStream(r io.Reader) ([]any, error) {
	var groups []any
	err := manifest.Each(r, func(obj prometheusRule) error {
		if obj.Kind != "PrometheusRule" {
			return nil
		}
		if obj.APIVersion != "monitoring.coreos.com/v1" {
			return fmt.Errorf("PrometheusRule has apiVersion %q, want monitoring.coreos.com/v1", obj.APIVersion)
		}
		if len(obj.Spec.Groups) == 0 {
			return errors.New("PrometheusRule without spec.groups")
		}
		groups = append(groups, obj.Spec.Groups...)
		return nil
	})
	return groups, err
}
