// Command extract-rules writes the rule groups of every PrometheusRule in the
// given Kubernetes YAML files (multi-document streams, e.g. `helm template`
// output) as one plain Prometheus rule file, for `promtool check rules` and
// `promtool test rules`. CI uses it; yq is not available there.
//
//	go run ./scripts/extract-rules -o rules.yaml deploy/kubernetes/monitoring/prometheusrule.yaml
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("o", "", "output rule file (default: stdout)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: extract-rules [-o rules.yaml] manifest.yaml...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	data, err := extract(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "extract-rules:", err)
		os.Exit(1)
	}
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "extract-rules:", err)
		os.Exit(1)
	}
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

func fromStream(r io.Reader) ([]any, error) {
	var groups []any
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return groups, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				Groups []any `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if obj.Kind != "PrometheusRule" {
			continue
		}
		if obj.APIVersion != "monitoring.coreos.com/v1" {
			return nil, fmt.Errorf("document %d: PrometheusRule has apiVersion %q, want monitoring.coreos.com/v1", i, obj.APIVersion)
		}
		if len(obj.Spec.Groups) == 0 {
			return nil, fmt.Errorf("document %d: PrometheusRule without spec.groups", i)
		}
		groups = append(groups, obj.Spec.Groups...)
	}
}
