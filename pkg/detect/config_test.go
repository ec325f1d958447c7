package detect_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
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
	// Every detector of the registry, in its order.
	reg := detect.Registry()
	if len(ds) != len(reg) {
		t.Fatalf("%d detectors for %d registry entries", len(ds), len(reg))
	}
	for i, e := range reg {
		if ds[i].Class() != e.Class() {
			t.Errorf("detector %d is %s, the registry's entry %s", i, ds[i].Class(), e.Class())
		}
	}
	// cache_collapse and kv_saturation read 5m + 1h back.
	if got := cfg.MaxLookback(); got != 65*time.Minute {
		t.Errorf("MaxLookback = %s, want 1h5m", got)
	}
}

// only disables every detector but the classes given.
func only(cfg *detect.Config, keep ...detect.Class) {
	for _, e := range cfg.Catalog() {
		if !slices.Contains(keep, e.Class()) {
			*cfg = e.Disable(*cfg)
		}
	}
}

func TestNewBuildsOnlyEnabledDetectors(t *testing.T) {
	cfg := detect.DefaultConfig()
	only(&cfg, detect.ReplicaDown, detect.PreemptStorm, detect.CacheCollapse, detect.RetryAvalanche)
	detect.Edit(&cfg, func(s *detect.CacheCollapseConfig) { s.Enabled = false })
	detect.Edit(&cfg, func(s *detect.RetryAvalancheConfig) { s.Enabled = false })
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
	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) { s.Enabled = false })
	detect.Edit(&cfg, func(s *detect.ReplicaDownConfig) { s.Enabled = false })
	if got := cfg.MaxLookback(); got != 0 {
		t.Errorf("MaxLookback with nothing enabled = %s", got)
	}
}

func TestValidateReportsEveryProblemWithItsPath(t *testing.T) {
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) { s.KVUsageThreshold, s.Range = 1.5, 0 })
	detect.Edit(&cfg, func(s *detect.RetryAvalancheConfig) {
		s.ArrivalEndpoints, s.MinAmplification = "/generate||/v1/completions", 1
	})
	detect.Edit(&cfg, func(s *detect.CacheCollapseConfig) { s.MaxRatioToBaseline = 1 })
	detect.Edit(&cfg, func(s *detect.ReplicaDownConfig) { s.FailuresToPage, s.CrashLoopRestarts = 0, 1 })
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
	ps, rd := detect.Get[detect.PreemptStormConfig](cfg), detect.Get[detect.ReplicaDownConfig](cfg)
	if ps.Range != 3*time.Minute || ps.KVUsageThreshold != 0.95 || ps.Baseline != time.Hour ||
		detect.Get[detect.CacheCollapseConfig](cfg).Enabled ||
		rd.FailuresToPage != 5 || rd.CrashLoopWindow != time.Hour {
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
	detect.Edit(&cfg, func(s *detect.KVSaturationConfig) { s.CriticalUsage = 0.9 }) // below usage_threshold 0.95
	detect.Edit(&cfg, func(s *detect.EngineHangConfig) { s.FallbackRange, s.InferenceEndpoints = time.Minute, "" })
	detect.Edit(&cfg, func(s *detect.QueueLatencyConfig) { s.QueueShare = 1 })
	detect.Edit(&cfg, func(s *detect.DecodeSlowdownConfig) { s.CriticalITLRatio = 1.5 })
	detect.Edit(&cfg, func(s *detect.ColdStartConfig) { s.CriticalAfter = time.Minute })
	detect.Edit(&cfg, func(s *detect.LoraThrashConfig) { s.FullUtilization = 0 })
	detect.Edit(&cfg, func(s *detect.PDTransferFailureConfig) { s.BaselineRatio = 0.5 })
	detect.Edit(&cfg, func(s *detect.MetricsBlindConfig) { s.FailuresToReport = 0 })
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
		"detectors.cold_start.critical_after: must be at least startup_budget (15m0s), got 1m0s",
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
	hang := detect.Get[detect.EngineHangConfig](cfg)
	if detect.Get[detect.KVSaturationConfig](cfg).UsageThreshold != 0.97 || hang.Range != 3*time.Minute ||
		hang.FallbackRange != 5*time.Minute || detect.Get[detect.ColdStartConfig](cfg).StartupBudget != 15*time.Minute ||
		detect.Get[detect.MetricsBlindConfig](cfg).Enabled || cfg.Triage.MinQueued != 10 || cfg.Triage.Range != time.Minute {
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

// classConstants returns the Class constants declared in the package's
// source, so a class added without a registry entry fails the test below.
func classConstants(t *testing.T) []detect.Class {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []detect.Class
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Class" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: Class constant is not a string literal", fset.Position(v.Pos()))
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, detect.Class(s))
				}
			}
		}
	}
	return out
}

func TestRegistryHasOneEntryPerClass(t *testing.T) {
	entries := detect.Registry()
	count := map[detect.Class]int{}
	for _, e := range entries {
		count[e.Class()]++
	}
	for c, n := range count {
		if n != 1 {
			t.Errorf("class %s has %d registry entries", c, n)
		}
	}
	consts := classConstants(t)
	if len(consts) < 12 {
		t.Fatalf("found only %d Class constants: %v", len(consts), consts)
	}
	for _, c := range consts {
		if count[c] != 1 {
			t.Errorf("Class constant %q has %d registry entries, want 1", c, count[c])
		}
	}
	if len(entries) != len(consts) {
		t.Errorf("%d registry entries for %d Class constants", len(entries), len(consts))
	}
	// Each entry builds the detector of its own class.
	ds, err := detect.New(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != len(entries) {
		t.Fatalf("defaults build %d detectors for %d entries", len(ds), len(entries))
	}
	for i, e := range entries {
		if ds[i].Class() != e.Class() {
			t.Errorf("entry %s built a %s detector", e.Class(), ds[i].Class())
		}
	}
}

func TestEveryEntrysDefaultsValidate(t *testing.T) {
	cfg := detect.DefaultConfig()
	for _, e := range detect.Registry() {
		if !e.Enabled(cfg) {
			t.Errorf("%s is off by default", e.Class())
		}
		if errs := e.Check(cfg); len(errs) != 0 {
			t.Errorf("%s defaults: %v", e.Class(), errs)
		}
		// A disabled section is reset to valid defaults.
		off := e.Disable(cfg)
		if e.Enabled(off) || len(e.Check(off)) != 0 || !e.Enabled(cfg) {
			t.Errorf("%s: Disable gave enabled %v, problems %v (original enabled %v)",
				e.Class(), e.Enabled(off), e.Check(off), e.Enabled(cfg))
		}
	}
	// The zero Config has no settings at all: every section is invalid.
	var zero detect.Config
	err := zero.Validate()
	for _, e := range detect.Registry() {
		if len(e.Check(zero)) == 0 {
			t.Errorf("%s: zero settings accepted", e.Class())
		}
		if err == nil || !strings.Contains(err.Error(), "detectors."+string(e.Class())+".") {
			t.Errorf("Validate of the zero config does not name %s", e.Class())
		}
	}
}

func TestMaxLookbackIsTheLongestEnabledLookback(t *testing.T) {
	defaults := detect.DefaultConfig()
	none := defaults
	for _, e := range detect.Registry() {
		none = e.Disable(none)
	}
	if got := none.MaxLookback(); got != 0 {
		t.Errorf("MaxLookback with every detector off = %s, want 0", got)
	}
	var longest time.Duration
	for _, e := range detect.Registry() {
		longest = max(longest, e.Lookback(defaults))
	}
	if got := defaults.MaxLookback(); got != longest {
		t.Errorf("MaxLookback = %s, want the longest entry look-back %s", got, longest)
	}
	// One detector at a time: its own look-back, or the triage's when it
	// attaches the triage and that reads further back (1m + 1h).
	triage := max(defaults.Triage.CapacityLookback, defaults.Triage.Range+defaults.Triage.LatencyBaseline)
	for _, e := range detect.Registry() {
		alone := defaults
		for _, other := range detect.Registry() {
			if other.Class() != e.Class() {
				alone = other.Disable(alone)
			}
		}
		own, got := e.Lookback(alone), alone.MaxLookback()
		if own <= 0 {
			t.Errorf("%s: look-back %s", e.Class(), own)
		}
		if got != own && (got != triage || own > triage) {
			t.Errorf("%s alone: MaxLookback %s, its look-back %s, triage %s", e.Class(), got, own, triage)
		}
	}
	// Lengthening one section lengthens the maximum.
	cfg := defaults
	detect.Edit(&cfg, func(s *detect.LoraThrashConfig) { s.Baseline = 3 * time.Hour })
	if got := cfg.MaxLookback(); got != 3*time.Hour+2*time.Minute {
		t.Errorf("MaxLookback with lora_thrash 2m + 3h = %s", got)
	}
	detect.Edit(&cfg, func(s *detect.LoraThrashConfig) { s.Enabled = false })
	if got := cfg.MaxLookback(); got != 65*time.Minute {
		t.Errorf("MaxLookback with lora_thrash off = %s, want 1h5m", got)
	}
}

func TestConfigCopiesAreIndependent(t *testing.T) {
	a := detect.DefaultConfig()
	b := a
	detect.Edit(&b, func(s *detect.PreemptStormConfig) { s.Range = time.Second })
	if got := detect.Get[detect.PreemptStormConfig](a).Range; got != 2*time.Minute {
		t.Errorf("editing a copy changed the original: range %s", got)
	}
	if got := detect.Get[detect.PreemptStormConfig](b).Range; got != time.Second {
		t.Errorf("edit lost: range %s", got)
	}
}

func TestConfigYAMLRejectsUnknownKeysWithTheirPath(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"preemt_storm:\n  range: 3m\n", "line 1: detectors.preemt_storm: no such detector"},
		{"preempt_storm:\n  range: 3m\n  rnage: 2m\n", "line 3: detectors.preempt_storm.rnage: no such field"},
		{"triage:\n  min_queud: 2\n", "line 2: detectors.triage.min_queud: no such field"},
		{"replica_down:\n  failures_to_page: many\n", "line 2: cannot unmarshal"},
		{"lora_thrash: {}\nlora_thrash: {enabled: false}\n", "line 2: detectors.lora_thrash: already given at line 1"},
		{"- preempt_storm\n", "detectors: must be a mapping"},
	} {
		cfg := detect.DefaultConfig()
		err := yaml.Unmarshal([]byte(tt.doc), &cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.doc, err, tt.want)
		}
	}
	// A strict decoder over a whole file reports the same.
	var file struct {
		Detectors detect.Config `yaml:"detectors"`
	}
	file.Detectors = detect.DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader("detectors:\n  cold_start:\n    startup_budgett: 1m\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err == nil || !strings.Contains(err.Error(), "line 3: detectors.cold_start.startup_budgett: no such field") {
		t.Errorf("strict decoder: %v", err)
	}
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	out, err := yaml.Marshal(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var back detect.Config
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, detect.DefaultConfig()) {
		t.Errorf("round trip changed the defaults:\n%s", out)
	}
	// Sections in registry order, then the triage.
	var keys []string
	var doc map[string]any
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, e := range detect.Registry() {
		keys = append(keys, string(e.Class()))
	}
	keys = append(keys, "triage")
	if len(doc) != len(keys) {
		t.Errorf("sections %d, want %d", len(doc), len(keys))
	}
	last := -1
	for _, k := range keys {
		i := strings.Index("\n"+string(out), "\n"+k+":")
		if i <= last {
			t.Errorf("section %s out of order in:\n%s", k, out)
		}
		last = i
	}
}
