package config

import (
	"os"
)

// CheckFile validates a configuration file as the daemon loads it: the
// same strict decode over the defaults and the same validation, every
// problem at once with its YAML path. What the daemon takes from its
// environment at start-up is not asked of the file: environment overrides
// are not applied, *_file secrets are not read (they are mounted where the
// daemon runs), and a file without targets is valid because
// WATCHDOG_TARGETS may supply them.
func CheckFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	cfg, err := Parse(Default(), data)
	if err != nil {
		return err
	}
	if len(cfg.Targets) == 0 {
		// Stands for the targets the environment supplies; a valid one, so
		// it adds no problem of its own.
		cfg.Targets = []Target{{Name: "from-environment", URL: "http://from-environment.invalid:30000"}}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return nil
}
