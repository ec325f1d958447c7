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
	want := "replica_down,preempt_storm,cache_collapse,retry_avalanche,kv_saturation,engine_hang," +
		"queue_latency,decode_slowdown,cold_start,lora_thrash,pd_transfer_failure,metrics_blind"
	if got := strings.Join(classes, ","); got != want {
		t.Errorf("detectors = %s", got)
	}
	// cache_collapse and kv_saturation read 5m + 1h back.
	if got := cfg.MaxLookback(); got != 65*time.Minute {
		t.Errorf("MaxLookback = %s, want 1h5m", got)
	}
}

// onlyCore disables the detectors added after the first four.
func onlyCore(cfg *detect.Config) {
	cfg.KVSaturation.Enabled = false
	cfg.EngineHang.Enabled = false
	cfg.QueueLatency.Enabled = false
	cfg.DecodeSlowdown.Enabled = false
	cfg.ColdStart.Enabled = false
	cfg.LoraThrash.Enabled = false
	cfg.PDTransferFailure.Enabled = false
	cfg.MetricsBlind.Enabled = false
}

func TestNewBuildsOnlyEnabledDetectors(t *testing.T) {
	cfg := detect.DefaultConfig()
	onlyCore(&cfg)
	cfg.CacheCollapse.Enabled = false
	cfg.RetryAvalanche.Enabled = false
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Class() != detect.ReplicaDown || ds[1].Class() != detect.PreemptStorm {
		t.Errorf("detectors = %v", ds)
	}
	// preempt_storm reads 2m + 1h; its layer triage 1m + 1h.
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

func TestValidateNewSections(t *testing.T) {
	cfg := detect.DefaultConfig()
	cfg.KVSaturation.CriticalUsage = 0.9 // below usage_threshold 0.95
	cfg.EngineHang.FallbackRange = time.Minute
	cfg.EngineHang.InferenceEndpoints = ""
	cfg.QueueLatency.QueueShare = 1
	cfg.DecodeSlowdown.CriticalITLRatio = 1.5
	cfg.ColdStart.CriticalAfter = time.Minute
	cfg.LoraThrash.FullUtilization = 0
	cfg.PDTransferFailure.BaselineRatio = 0.5
	cfg.MetricsBlind.FailuresToReport = 0
	cfg.Triage.KVFullUsage = 2
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	want := []string{
		"detectors.kv_saturation.critical_usage: must be at least usage_threshold (0.95), got 0.9",
		"detectors.engine_hang.fallback_range: must be at least range (2m0s), got 1m0s",
		"detectors.engine_hang.inference_endpoints: ",
		"detectors.queue_latency.queue_share: must be in (0,1), got 1",
		"detectors.decode_slowdown.critical_itl_ratio: must be at least itl_ratio (2), got 1.5",
		"detectors.cold_start.critical_after: must be at least startup_budget (10m0s), got 1m0s",
		"detectors.lora_thrash.full_utilization: must be in (0,1], got 0",
		"detectors.pd_transfer_failure.baseline_ratio: must be at least 1, got 0.5",
		"detectors.metrics_blind.failures_to_report: must be at least 1, got 0",
		"detectors.triage.kv_full_usage: must be in (0,1], got 2",
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
}

func TestNewSectionsYAML(t *testing.T) {
	cfg := detect.DefaultConfig()
	doc := `
kv_saturation:
  usage_threshold: 0.97
engine_hang:
  range: 3m
cold_start:
  startup_budget: 15m
  critical_after: 30m
metrics_blind:
  enabled: false
triage:
  min_queued: 10
`
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.KVSaturation.UsageThreshold != 0.97 || cfg.EngineHang.Range != 3*time.Minute ||
		cfg.EngineHang.FallbackRange != 5*time.Minute || cfg.ColdStart.StartupBudget != 15*time.Minute ||
		cfg.MetricsBlind.Enabled || cfg.Triage.MinQueued != 10 || cfg.Triage.Range != time.Minute {
		t.Errorf("decoded config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	ds, _ := detect.New(cfg)
	for _, d := range ds {
		if d.Class() == detect.MetricsBlind {
			t.Error("disabled metrics_blind built")
		}
	}
	out, err := yaml.Marshal(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"kv_saturation:", "engine_hang:", "queue_latency:", "decode_slowdown:", "cold_start:",
		"lora_thrash:", "pd_transfer_failure:", "metrics_blind:", "triage:", "inference_endpoints:", "startup_budget:"} {
		if !strings.Contains(string(out), key) {
			t.Errorf("YAML of the defaults lacks %q", key)
		}
	}
}
