package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
)

// FuzzParse feeds arbitrary YAML, seeded with the example configurations
// and every test configuration, through the loader as the daemon runs it
// (decode over the defaults, then validate). Nothing may panic, every
// failure must say something, and a configuration that validates must
// survive a second validation unchanged (validation is a pure check).
func FuzzParse(f *testing.F) {
	for _, b := range configs.Files() {
		f.Add(b)
	}
	paths, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(Default(), data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("a decoding error without a message")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			if err.Error() == "" {
				t.Fatal("a validation error without a message")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("valid once, invalid the second time: %v", err)
		}
	})
}
