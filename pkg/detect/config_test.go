package detect_test

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

func TestDefaultConfigIsValid(t *testing.T) {
	cfg := detect.DefaultConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, d := range ds {
		classes = append(classes, string(d.Class()))
	}
	if got := strings.Join(classes, ","); got != "replica_down,preempt_storm,cache_collapse,retry_avalanche" {
		t.Errorf("detectors = %s", got)
	}
	// cache_collapse reads 5m + 1h back.
	if got := cfg.MaxLookback(); got != 65*time.Minute {
		t.Errorf("MaxLookback = %s, want 1h5m", got)
	}
}

func TestNewBuildsOnlyEnabledDetectors(t *testing.T) {
	cfg := detect.DefaultConfig()
	cfg.CacheCollapse.Enabled = false
	cfg.RetryAvalanche.Enabled = false
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Class() != detect.ReplicaDown || ds[1].Class() != detect.PreemptStorm {
		t.Errorf("detectors = %v", ds)
	}
	if got := cfg.MaxLookback(); got != 62*time.Minute {
		t.Errorf("MaxLookback without cache_collapse = %s, want 1h2m", got)
	}
	cfg.PreemptStorm.Enabled, cfg.ReplicaDown.Enabled = false, false
	if got := cfg.MaxLookback(); got != 0 {
		t.Errorf("MaxLookback with nothing enabled = %s", got)
	}
}

func TestValidateReportsEveryProblemWithItsPath(t *testing.T) {
	cfg := detect.DefaultConfig()
	cfg.PreemptStorm.KVUsageThreshold = 1.5
	cfg.PreemptStorm.Range = 0
	cfg.RetryAvalanche.ArrivalEndpoints = "/generate||/v1/completions"
	cfg.RetryAvalanche.MinAmplification = 1
	cfg.CacheCollapse.MaxRatioToBaseline = 1
	cfg.ReplicaDown.FailuresToPage = 0
	cfg.ReplicaDown.CrashLoopRestarts = 1
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	want := []string{
		"detectors.preempt_storm.kv_usage_threshold: must be in (0,1], got 1.5",
		"detectors.preempt_storm.range: must be a positive duration, got 0s",
		"detectors.retry_avalanche.arrival_endpoints: ",
		"detectors.retry_avalanche.min_amplification: must be greater than 1, got 1",
		"detectors.cache_collapse.max_ratio_to_baseline: must be in (0,1), got 1",
		"detectors.replica_down.failures_to_page: must be at least 1, got 0",
		"detectors.replica_down.crash_loop_restarts: must be at least 2, got 1",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("missing %q in:\n%s", w, err)
		}
	}
	if _, err := detect.New(cfg); err == nil {
		t.Error("New accepted an invalid config")
	}
	if err := (detect.Config{}).Validate(); err == nil {
		t.Error("zero config accepted")
	}
}

// The lead decodes the YAML section onto the defaults: fields not given
// keep their default, durations are Go durations.
func TestConfigYAML(t *testing.T) {
	cfg := detect.DefaultConfig()
	doc := `
preempt_storm:
  range: 3m
  kv_usage_threshold: 0.95
cache_collapse:
  enabled: false
replica_down:
  failures_to_page: 5
  crash_loop_window: 1h
`
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.PreemptStorm.Range != 3*time.Minute || cfg.PreemptStorm.KVUsageThreshold != 0.95 ||
		cfg.PreemptStorm.Baseline != time.Hour || cfg.CacheCollapse.Enabled ||
		cfg.ReplicaDown.FailuresToPage != 5 || cfg.ReplicaDown.CrashLoopWindow != time.Hour {
		t.Errorf("decoded config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	out, err := yaml.Marshal(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"preempt_storm:", "min_retractions_per_second:", "arrival_endpoints:", "restart_grace:", "crash_loop_restarts:"} {
		if !strings.Contains(string(out), key) {
			t.Errorf("YAML of the defaults lacks %q", key)
		}
	}
}
