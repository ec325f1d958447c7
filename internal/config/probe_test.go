package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The /health_generate probe is on by default for every engine target,
// every 30 s, with a bounded timeout and concurrency; nonsense is rejected
// with its path.
func TestHealthProbeDefaultsAndValidation(t *testing.T) {
	hp := Default().Scrape.HealthProbe
	if want := (HealthProbe{Enabled: true, Interval: 30 * time.Second, Timeout: 25 * time.Second, MaxConcurrent: 32}); hp != want {
		t.Errorf("default health probe %+v, want %+v", hp, want)
	}
	_, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": filepath.Join("testdata", "bad-health-probe.yaml")})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"scrape.health_probe.timeout", "scrape.health_probe.max_concurrent"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %q:\n%v", w, err)
		}
	}
	off, err := Parse(Default(), []byte("scrape:\n  health_probe: {enabled: false, max_concurrent: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	off.Targets = []Target{{Name: "a", URL: "http://127.0.0.1:30000"}}
	if err := off.Validate(); err != nil {
		t.Errorf("a disabled probe needs no valid settings: %v", err)
	}
}
