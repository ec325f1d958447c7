// Command extract-config writes the watchdog.yaml of the one ConfigMap in
// a Kubernetes YAML stream (e.g. `helm template` output) that carries it,
// so CI can run `watchdog check config` on what the chart renders. yq is
// not available there.
//
//	go run ./scripts/extract-config -o watchdog.yaml rendered.yaml
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const configKey = "watchdog.yaml"

func main() {
	out := flag.String("o", "", "output file (default: stdout)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: extract-config [-o watchdog.yaml] manifest.yaml")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "extract-config:", err)
		os.Exit(1)
	}
	defer f.Close()
	data, err := extract(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "extract-config: %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	if *out == "" {
		os.Stdout.Write(data)
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "extract-config:", err)
		os.Exit(1)
	}
}

// extract returns data[watchdog.yaml] of the stream's one ConfigMap that
// has it.
func extract(r io.Reader) ([]byte, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var found []string
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal(doc, &cm); err != nil {
			return nil, err
		}
		if cm.Kind == "ConfigMap" {
			if v, ok := cm.Data[configKey]; ok {
				found = append(found, v)
			}
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d ConfigMaps with %s, want 1", len(found), configKey)
	}
	return []byte(found[0]), nil
}
