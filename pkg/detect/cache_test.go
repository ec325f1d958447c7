package detect_test

import (
	"math"
	"regexp"
	"slices"
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

// A full pool that admits fewer prompts evicts fewer tokens than before:
// the page keeps the number in its evidence but does not cite it as the
// evictions that pushed the prefixes out.
func TestCacheCollapseUnderPressureDoesNotCiteFallingEvictions(t *testing.T) {
	s := runbookSnapshot().with(counter(series.EvictedTokensTotal, stepAt(incidentLong, 4000, 1500), "cache_type", "RadixCache"))
	f := one(t, run(t, s, detect.CacheCollapse))
	if f.Layer != detect.LayerMemory {
		t.Fatalf("layer = %s, want kv_memory", f.Layer)
	}
	if ev := evidenceNamed(t, f, "evicted tokens/s"); !approx(ev.Value, 1500, 0.01) || !approx(ev.Baseline, 4000, 0.01) {
		t.Errorf("eviction evidence = %+v, want 1500 against 4000", ev)
	}
	if strings.Contains(f.Diagnosis, "(evictions") {
		t.Errorf("diagnosis cites evictions that fell as the pressure: %s", f.Diagnosis)
	}
	if !strings.Contains(f.Diagnosis, "evicts shared prefixes to make room") {
		t.Errorf("diagnosis lost the memory-pressure reasoning: %s", f.Diagnosis)
	}
}

// A collapse that multiplies a fast TTFT p99 (0.08 s -> 0.6 s, 7.5x) is a
// warning: critical pages wake someone, and nobody is woken for a p99
// under critical_min_ttft. The same rise past it is critical.
func TestCacheCollapseIsCriticalOnlyWhereUsersFeelTheTTFT(t *testing.T) {
	for _, c := range []struct {
		ttft float64
		want detect.Severity
	}{{0.6, detect.Warning}, {1.5, detect.Critical}} {
		s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...).with(
			hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.08, c.ttft)))
		f := one(t, run(t, s, detect.CacheCollapse))
		e := evidenceNamed(t, f, "TTFT p99")
		if f.Severity != c.want || !(e.Value >= 2*e.Baseline) || !strings.Contains(e.Threshold, ">= 1 s for critical") {
			t.Errorf("TTFT p99 %v s against %v s (%q): %s, want %s", e.Value, e.Baseline, e.Threshold, f.Severity, c.want)
		}
	}
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
	// 500 evicted tokens/s against 9500 computed anew: the pool was not full.
	contains(t, "diagnosis", f.Diagnosis, "the cache had room", "500 evicted tokens/s are 5% of the prompt tokens while 95% were computed anew")
}

// Page boundaries explain a missed prefix only where a page holds more
// than one token; with one-token pages (SGLang's default) the sentence and
// the page-size line would be advice that fits nothing. A release without
// the page-size gauge keeps the sentence, without a size.
func TestCacheCollapsePageBoundariesOnlyWherePagesHoldTokens(t *testing.T) {
	for _, c := range []struct {
		name     string
		scenario *scenario
		sentence bool
		evidence bool
	}{
		{"page size 16", healthyEngine(), true, true},
		{"page size 1", healthyEngine().with(gauge(series.PageSize, constant(1))), false, false},
		{"no page-size gauge", healthyEngine().without(series.PageSize), true, false},
	} {
		f := one(t, run(t, c.scenario.with(hitRateChange(incidentLong, 0.05)...), detect.CacheCollapse))
		if got := strings.Contains(f.Diagnosis, "page boundaries"); got != c.sentence {
			t.Errorf("%s: page-boundary sentence %v, want %v: %s", c.name, got, c.sentence, f.Diagnosis)
		}
		if got := slices.ContainsFunc(f.Evidence, func(e detect.Evidence) bool { return e.Name == "KV page size" }); got != c.evidence {
			t.Errorf("%s: page-size evidence %v, want %v: %+v", c.name, got, c.evidence, f.Evidence)
		}
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

// churningEngine is healthyEngine with the counters a full radix cache
// gives (internal/sim measures it): 10 requests/s of 1000 prompt tokens,
// 70% hits, 300 generated tokens each, and every newly computed token —
// 3000 missed prompt tokens and 3000 generated tokens a second — evicts a
// cached one. 40 running requests hold 20% of the 400k-token pool.
func churningEngine() *scenario {
	return healthyEngine().with(
		counter(series.EvictedTokensTotal, constant(6000), "cache_type", "RadixCache"),
		counter(series.GenerationTokensTotal, constant(3000)),
		gauge(series.TokenUsage, constant(0.2)),
		gauge(series.FullTokenUsage, constant(0.2)),
	)
}

// noBareShares fails when a share is printed as a fraction ("0.6").
func noBareShares(t *testing.T, text string) {
	t.Helper()
	if m := regexp.MustCompile(`(usage|rate|baseline) 0\.\d+(\)|,|;| \()`).FindString(text); m != "" {
		t.Errorf("share printed as a fraction (%q): %s", m, text)
	}
}

// A neighbour's long documents join the chat traffic: prompt tokens rise
// to 16k/s (1455 per request), running requests to 60 holding 70% of the
// pool — 4667 tokens each where the lost hits explain 2400 — and the chat
// prefixes are pushed out: hit rate 70% -> 30% under 14.5k evicted
// tokens/s. KV usage stays below the 85% pressure threshold, so only the
// eviction side tells the cause.
func TestCacheCollapseEvictionPressureBelowUsageThreshold(t *testing.T) {
	at := incidentLong
	s := churningEngine().with(
		counter(series.PrefillEffectiveTokens, stepAt(at, 3000, 11200), "mode", "input"),
		counter(series.PrefillEffectiveTokens, stepAt(at, 7000, 4800), "mode", "device_hit"),
		counter(series.NumRequestsTotal, stepAt(at, 10, 11)),
		counter(series.GenerationTokensTotal, stepAt(at, 3000, 3300)),
		counter(series.EvictedTokensTotal, stepAt(at, 6000, 14500), "cache_type", "RadixCache"),
		gauge(series.NumRunningReqs, stepAt(at, 40, 60)),
		gauge(series.TokenUsage, stepAt(at, 0.2, 0.7)),
		gauge(series.FullTokenUsage, stepAt(at, 0.2, 0.7)),
	)
	f := one(t, run(t, s, detect.CacheCollapse))
	checkCommon(t, f, detect.CacheCollapse)
	if f.Layer != detect.LayerMemory {
		t.Errorf("layer = %s, want kv_memory", f.Layer)
	}
	contains(t, "summary", f.Summary, "evicted under memory pressure", "14500 evicted tokens/s")
	contains(t, "diagnosis", f.Diagnosis, "evicted under memory pressure", "70% (baseline 20%)",
		"4667 KV tokens (baseline 2000), more than the 2400 the lost hits explain", "prompt traffic rose", "memory-pressure chain")
	for _, wrong := range []string{"normal", "has room", "had room", "stopped sharing"} {
		if strings.Contains(f.Diagnosis, wrong) {
			t.Errorf("diagnosis says %q while the cache churns under pressure: %s", wrong, f.Diagnosis)
		}
	}
	noBareShares(t, f.Summary+" "+f.Diagnosis)
	contains(t, "emergency steps", strings.Join(f.Emergency, " "), "add replicas", "--max-running-requests", "mem-fraction-static")
	if strings.Contains(strings.Join(f.Emergency, " "), "prompt template") {
		t.Errorf("eviction pressure sends on-call after prompt templates: %v", f.Emergency)
	}
	// The evidence shows the numbers the diagnosis rests on.
	if e := evidenceNamed(t, f, "evicted tokens per prompt token"); !approx(e.Value, 14500.0/16000, 0.01) || !approx(e.Baseline, 0.6, 0.01) {
		t.Errorf("eviction share evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "KV tokens held per running request"); !approx(e.Value, 4667, 0.01) || !strings.Contains(e.Threshold, "2400") {
		t.Errorf("KV per request evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "KV cache usage"); strings.Contains(e.Threshold, "normal") || !strings.Contains(e.Threshold, "not counted") {
		t.Errorf("KV usage evidence contradicts the diagnosis: %+v", e)
	}
}

// A timestamp in the system prompt on a full cache: hits 70% -> 0%,
// evictions rise by exactly the lost hits (6000 -> 13000 tokens/s), the
// queue fills the batch (40 -> 60 running) and KV usage doubles because
// each running request now holds its whole prompt (2700 tokens, as the
// lost hits explain). Traffic is steady. Not memory pressure.
func TestCacheCollapsePromptChangeOnFullCache(t *testing.T) {
	at := incidentLong
	s := churningEngine().with(hitRateChange(at, 0)...).with(
		counter(series.EvictedTokensTotal, stepAt(at, 6000, 13000), "cache_type", "RadixCache"),
		gauge(series.NumRunningReqs, stepAt(at, 40, 60)),
		gauge(series.TokenUsage, stepAt(at, 0.2, 0.405)),
		gauge(series.FullTokenUsage, stepAt(at, 0.2, 0.405)),
	)
	f := one(t, run(t, s, detect.CacheCollapse))
	if f.Layer != detect.LayerPrefill {
		t.Errorf("layer = %s, want prefill", f.Layer)
	}
	contains(t, "diagnosis", f.Diagnosis, "prompts most likely stopped sharing prefixes", "no more than the lost hits add",
		"40.5% (baseline 20%)", "2700 tokens each, 2700 expected", "cannot tell apart", "timestamp")
	for _, wrong := range []string{"normal", "has room", "had room", "evicted under memory pressure"} {
		if strings.Contains(f.Diagnosis, wrong) {
			t.Errorf("diagnosis says %q: %s", wrong, f.Diagnosis)
		}
	}
	noBareShares(t, f.Summary+" "+f.Diagnosis)
	if !strings.Contains(f.Emergency[0], "prompt template") {
		t.Errorf("first emergency step should ask about prompt changes: %v", f.Emergency)
	}
}

// Older releases do not export sglang:evicted_tokens_total: the page says
// so and claims neither cause, and its steps cover both.
func TestCacheCollapseWithoutEvictionCounter(t *testing.T) {
	s := healthyEngine().with(hitRateChange(incidentLong, 0.05)...).without(series.EvictedTokensTotal)
	f := one(t, run(t, s, detect.CacheCollapse))
	contains(t, "diagnosis", f.Diagnosis, "does not export the eviction counter (sglang:evicted_tokens_total)",
		"cannot tell prompts that stopped sharing prefixes from shared prefixes evicted under memory pressure", "50% (baseline 50%)")
	for _, wrong := range []string{"most likely", "normal", "had room", "memory-pressure chain"} {
		if strings.Contains(f.Diagnosis, wrong) {
			t.Errorf("diagnosis claims %q without the eviction counter: %s", wrong, f.Diagnosis)
		}
	}
	contains(t, "emergency steps", strings.Join(f.Emergency, " "), "prompt template", "treat it as eviction pressure")
}
