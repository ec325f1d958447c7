// Command extract-config writes the watchdog.yaml of the one ConfigMap in
// a Kubernetes YAML stream (e.g. `helm template` output) that carries it,
// so CI can run `watchdog check config` on what the chart renders.
//
//	go run ./scripts/extract-config -o watchdog.yaml rendered.yaml
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/sglang-watchdog/sglang-watchdog/scripts/internal/manifest"
)

const configKey = "watchdog.yaml"

func main() {
	manifest.Main("extract-config", "extract-config [-o watchdog.yaml] manifest.yaml",
		func(n int) bool { return n == 1 },
		func(args []string) ([]byte, error) {
			f, err := os.Open(args[0])
			if err != nil {
				return nil, err
			}
			defer f.Close()
			data, err := extract(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", args[0], err)
			}
			return data, nil
		})
}

// extract returns data[watchdog.yaml] of the stream's one ConfigMap that
// has it.
func extract(r io.Reader) ([]byte, error) {
	type configMap struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	var found []string
	err := manifest.Each(r, func(cm configMap) error {
		if v, ok := cm.Data[configKey]; ok && cm.Kind == "ConfigMap" {
			found = append(found, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d ConfigMaps with %s, want 1", len(found), configKey)
	}
	return []byte(found[0]), nil
}
