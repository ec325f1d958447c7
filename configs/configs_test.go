package configs_test

import (
	"reflect"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
)

// Every example must load and validate, so examples cannot rot.
func TestEveryExampleLoadsAndValidates(t *testing.T) {
	files := configs.Files()
	if len(files) < 2 {
		t.Fatalf("expected watchdog.yaml and demo.yaml, got %d files", len(files))
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse(config.Default(), data)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Targets) == 0 { // the demo adds its own targets
				cfg.Targets = []config.Target{{Name: "t", URL: "http://127.0.0.1:30000"}}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// watchdog.yaml documents the defaults: decoding it over an empty config
// must give exactly Default(), so the documented values cannot drift from
// the code.
func TestWatchdogYAMLStatesTheDefaults(t *testing.T) {
	got, err := config.Parse(config.Config{}, configs.Files()["watchdog.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	if len(got.Targets) != 0 {
		t.Fatalf("the example lists live targets: %+v", got.Targets)
	}
	got.Targets, want.Targets = nil, nil
	normalize := func(c *config.Config) {
		if len(c.Runbooks) == 0 {
			c.Runbooks = nil
		}
		if len(c.Alerts.Classes) == 0 {
			c.Alerts.Classes = nil
		}
		if len(c.Discovery.DNS) == 0 {
			c.Discovery.DNS = nil
		}
		if len(c.Notify.Alertmanager.URLs) == 0 {
			c.Notify.Alertmanager.URLs = nil
		}
		if len(c.Discovery.FileSD) == 0 {
			c.Discovery.FileSD = nil
		}
		if len(c.Correlation.GPUTargets) == 0 {
			c.Correlation.GPUTargets = nil
		}
	}
	normalize(&got)
	normalize(&want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("configs/watchdog.yaml differs from config.Default():\n got  %+v\n want %+v", got, want)
	}
}
