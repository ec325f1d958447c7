package config

import (
	"path/filepath"
	"testing"
	"time"
)

// The journal's retention reads in days, as Prometheus' durations do.
func TestIncidentsRetentionReadsDays(t *testing.T) {
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": filepath.Join("testdata", "good-incidents.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(cfg.Incidents.Retention); got != 7*24*time.Hour {
		t.Errorf("retention %s, want 7 days", got)
	}
	if cfg.Incidents.MaxIncidents != DefaultIncidents().MaxIncidents {
		t.Errorf("max_incidents %d, want the default", cfg.Incidents.MaxIncidents)
	}
}
