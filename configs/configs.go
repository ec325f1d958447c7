// Package configs embeds the example configuration files so the demo can
// run from the binary alone and a test can load every file, keeping the
// examples from rotting.
package configs

import "embed"

//go:embed *.yaml
var files embed.FS

// Demo is configs/demo.yaml: the daemon's settings with time compressed for
// the built-in simulated fleet.
func Demo() []byte {
	b, err := files.ReadFile("demo.yaml")
	if err != nil {
		panic(err) // embedded at build time; cannot fail at run time
	}
	return b
}

// Files returns every embedded example by name.
func Files() map[string][]byte {
	out := map[string][]byte{}
	entries, _ := files.ReadDir(".")
	for _, e := range entries {
		b, _ := files.ReadFile(e.Name())
		out[e.Name()] = b
	}
	return out
}
