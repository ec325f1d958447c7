package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// hitRateChange moves the prefix hit rate from 0.7 to to at the incident,
// consistently in every counter family SGLang exposes for it, at 10,000
// prompt tokens/s.
func hitRateChange(at time.Duration, to float64) []metric {
	hit, miss := stepAt(at, 7000, 10000*to), stepAt(at, 3000, 10000*(1-to))
	return []metric{
		counter(series.PrefillEffectiveTokens, miss, "mode", "input"),
		counter(series.PrefillEffectiveTokens, hit, "mode", "device_hit"),
		counter(series.RealtimeTokensTotal, miss, "mode", "prefill_compute"),
		counter(series.RealtimeTokensTotal, hit, "mode", "prefill_cache"),
		counter(series.CachedTokensTotal, hit, "cache_source", "device"),
	}
}

// runbookSnapshot is the runbook's example: 8 running, 47 queued, KV usage
// 0.91, the hit rate down from about 0.7 to 0.34.
func runbookSnapshot() *scenario {
	return healthyEngine().with(hitRateChange(incidentLong, 0.34)...).with(
		gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 8)),
		gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 47)),
		gauge(series.TokenUsage, stepAt(incidentLong, 0.5, 0.91)),
		gauge(series.FullTokenUsage, stepAt(incidentLong, 0.5, 0.91)),
		counter(series.EvictedTokensTotal, stepAt(incidentLong, 500, 4000), "cache_type", "RadixCache"),
		hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.3, 1.5)),
	)
}

func TestCacheCollapseRunbookSnapshotIsMemoryPressure(t *testing.T) {
	s := runbookSnapshot()
	f := one(t, run(t, s, detect.CacheCollapse))
	checkCommon(t, f, detect.CacheCollapse)
	if f.Layer != detect.LayerMemory {
		t.Errorf("layer = %s, want kv_memory", f.Layer)
	}
	e := evidenceNamed(t, f, "prefix cache hit rate")
	if !approx(e.Value, 0.34, 1e-6) || !approx(e.Baseline, 0.7, 1e-6) || !strings.Contains(e.Name, "prefill_effective_tokens_total") {
		t.Errorf("hit rate evidence = %+v; want 0.34 vs 0.7 from prefill_effective_tokens_total", e)
	}
	if kv := evidenceNamed(t, f, "KV cache usage"); !approx(kv.Value, 0.91, 1e-9) || !approx(kv.Baseline, 0.5, 1e-9) {
		t.Errorf("KV evidence = %+v", kv)
	}
	if q := evidenceNamed(t, f, "queued requests"); q.Value != 47 {
		t.Errorf("queue evidence = %+v", q)
	}
	if r := evidenceNamed(t, f, "running requests"); r.Value != 8 {
		t.Errorf("running evidence = %+v", r)
	}
	if ev := evidenceNamed(t, f, "evicted tokens/s"); !approx(ev.Value, 4000, 0.01) || !approx(ev.Baseline, 500, 0.01) {
		t.Errorf("eviction evidence = %+v", ev)
	}
	// TTFT p99 0.3 s -> 1.5 s (5x): users feel it.
	if f.Severity != detect.Critical {
		t.Errorf("severity = %s, want critical (TTFT p99 5x baseline)", f.Severity)
	}
	for _, want := range []string{"memory-pressure chain", "KV pressure -> eviction -> lower hit rate -> queue backlog", "not a GPU compute slowdown", "47 queued, 8 running"} {
		if !strings.Contains(f.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q: %s", want, f.Diagnosis)
		}
	}
	// The same snapshot is not a preemption storm (no retractions).
	none(t, run(t, runbookSnapshot(), detect.PreemptStorm))
}

func TestCacheCollapsePromptChange(t *testing.T) {
	// KV usage stays normal; every prompt became unique (a timestamp in the
	// system prompt): hit rate 0.7 -> 0.05.
	s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...)
	f := one(t, run(t, s, detect.CacheCollapse))
	checkCommon(t, f, detect.CacheCollapse)
	if f.Layer != detect.LayerPrefill || f.Severity != detect.Warning {
		t.Errorf("layer %s severity %s; want prefill warning (TTFT unchanged)", f.Layer, f.Severity)
	}
	for _, want := range []string{"prompts most likely stopped sharing prefixes", "timestamp", "chat template", "LoRA", "page size 16 tokens"} {
		if !strings.Contains(f.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q: %s", want, f.Diagnosis)
		}
	}
	if !strings.Contains(f.Emergency[0], "business") {
		t.Errorf("first emergency step should ask the business side: %v", f.Emergency)
	}
	if strings.Contains(f.Diagnosis, "memory-pressure chain") {
		t.Errorf("prompt change diagnosed as memory pressure: %s", f.Diagnosis)
	}
	if strings.Contains(f.Diagnosis, "Evictions rose") {
		t.Errorf("evictions did not rise, yet the diagnosis says so: %s", f.Diagnosis)
	}
}

// Every hit-rate source of the reference's version table gives the verdict.
func TestCacheCollapseSources(t *testing.T) {
	tests := []struct {
		name    string
		drop    []string // families the release does not expose
		evName  string
		wantNow float64
	}{
		{"current: prefill_effective_tokens_total", nil, "prefill_effective_tokens_total", 0.1},
		{"C1: realtime_tokens_total", []string{series.PrefillEffectiveTokens}, "realtime_tokens_total", 0.1},
		{"all versions: cached/prompt tokens", []string{series.PrefillEffectiveTokens, series.RealtimeTokensTotal}, "cached_tokens_total / prompt_tokens_total", 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := healthyEngine().with(hitRateChange(incidentLong, 0.1)...).without(tt.drop...)
			f := one(t, run(t, s, detect.CacheCollapse))
			e := evidenceNamed(t, f, "prefix cache hit rate")
			if !strings.Contains(e.Name, tt.evName) || !approx(e.Value, tt.wantNow, 1e-6) || !approx(e.Baseline, 0.7, 1e-6) {
				t.Errorf("evidence = %+v", e)
			}
		})
	}
}

func TestCacheCollapseDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		cfg      func(*detect.Config)
	}{
		{name: "healthy", scenario: healthyEngine()},
		{name: "healthy heavy load", scenario: healthyEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.NumQueueReqs, constant(5)),
			gauge(series.TokenUsage, constant(0.95)),
			gauge(series.FullTokenUsage, constant(0.95)),
		)},
		// The per-batch gauge reads 0 after every decode log; the counters
		// say the cache is fine. The gauge must never drive a verdict.
		{name: "cache_hit_rate gauge drops, counters healthy", scenario: healthyEngine().with(
			gauge(series.CacheHitRateGauge, stepAt(incidentLong, 0.7, 0))),
		},
		{name: "small drop", scenario: healthyEngine().with(hitRateChange(incidentLong, 0.5)...)},
		{name: "low baseline", scenario: healthyEngine().with(
			counter(series.PrefillEffectiveTokens, stepAt(incidentLong, 9000, 9800), "mode", "input"),
			counter(series.PrefillEffectiveTokens, stepAt(incidentLong, 1000, 200), "mode", "device_hit"),
		)},
		// 50 prompt tokens/s: 15,000 tokens in 5 minutes, below the floor.
		{name: "low traffic", scenario: healthyEngine().with(
			counter(series.PrefillEffectiveTokens, stepAt(incidentLong, 15, 45), "mode", "input"),
			counter(series.PrefillEffectiveTokens, stepAt(incidentLong, 35, 5), "mode", "device_hit"),
		)},
		// Counters reset to 0 mid-range; the hit rate is unchanged. With the
		// restart grace off, only reset-aware counter math keeps it quiet.
		{name: "counter reset after restart", scenario: func() *scenario {
			s := healthyEngine()
			s.restarts = []time.Duration{62 * minute}
			return s
		}(), cfg: func(c *detect.Config) { detect.Edit(c, func(s *detect.CacheCollapseConfig) { s.RestartGrace = 0 }) }},
		// A restarted replica's cache is cold: a real but expected drop.
		{name: "cold cache after restart", scenario: func() *scenario {
			s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...)
			s.restarts = []time.Duration{incidentLong}
			return s
		}()},
		{name: "missing series", scenario: newScenario(gauge(series.TokenUsage, constant(0.5)))},
		{name: "NaN/Inf samples", scenario: healthyEngine().with(
			counter(series.PrefillEffectiveTokens, constant(3000), "mode", "input").corrupted(every(3, math.Inf(1))),
			counter(series.PrefillEffectiveTokens, constant(7000), "mode", "device_hit").corrupted(every(2, math.NaN())),
			gauge(series.TokenUsage, constant(0)).corrupted(always(math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := detect.DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			none(t, detectWith(t, tt.scenario, cfg, detect.CacheCollapse))
		})
	}
}

// The cold-cache case is held by the restart grace, not by luck.
func TestCacheCollapseRestartGraceIsWhatHolds(t *testing.T) {
	s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...)
	s.restarts = []time.Duration{incidentLong}
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.CacheCollapseConfig) { s.RestartGrace = 0 })
	one(t, detectWith(t, s, cfg, detect.CacheCollapse))
}

// CacheCollapse's golden page (checkPage).
func TestGoldenPageEventsCacheCollapse(t *testing.T) {
	checkPage(t, pageCase{class: detect.CacheCollapse, scenario: runbookSnapshot()})
}

// TestCacheCollapseBelowUsageWithEvictionsRising: usage below the
// pressure threshold does not count cached tokens, so a collapse while
// evictions rise is not called a case of room to spare: the diagnosis
// still leads with the prompts and names the hidden pressure, in percent.
func TestCacheCollapseBelowUsageWithEvictionsRising(t *testing.T) {
	s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...).
		with(counter(series.EvictedTokensTotal, stepAt(incidentLong, 500, 4000), "cache_type", "RadixCache"))
	f := one(t, run(t, s, detect.CacheCollapse))
	for _, want := range []string{"KV usage is 50% (baseline 50%), below the 85%", "Evictions rose to 4000 tokens/s (baseline 500 tokens/s)", "does not count cached tokens"} {
		if !strings.Contains(f.Diagnosis, want) {
			t.Errorf("diagnosis lacks %q: %s", want, f.Diagnosis)
		}
	}
	if strings.Contains(f.Diagnosis, "normal") {
		t.Errorf("KV called normal while evictions rise: %s", f.Diagnosis)
	}
}
