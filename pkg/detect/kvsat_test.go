package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// kvUsageTo moves every KV usage family from half full to usage at at.
func kvUsageTo(at time.Duration, usage float64) []metric {
	const pool = 400000
	return []metric{
		gauge(series.TokenUsage, stepAt(at, 0.5, usage)),
		gauge(series.FullTokenUsage, stepAt(at, 0.5, usage)),
		gauge(series.NumUsedTokens, stepAt(at, 0.5*pool, usage*pool)),
		gauge(series.KVUsedTokens, stepAt(at, 0.5*pool, usage*pool)),
		gauge(series.KVAvailableTokens, stepAt(at, 0.375*pool, (1-usage)*pool)),
		gauge(series.KVEvictableTokens, stepAt(at, 0.125*pool, 0)),
	}
}

// runawayDecode is the seeds' second worked scenario: token_usage 0.97
// with most requests finishing by length — outputs of 4096 tokens where 300
// is normal — at the same 40 running requests, whose sequences grow.
func runawayDecode() *scenario {
	return fullEngine().with(kvUsageTo(incidentLong, 0.97)...).with(
		counter(series.NumRequestsTotal, stepAt(incidentLong, 10, 4)),
		counter(series.GenerationTokensTotal, stepAt(incidentLong, 3000, 4*4096)),
		hist(series.GenerationTokensHist, genTokBounds, stepAt(incidentLong, 10, 4), stepAt(incidentLong, 300, 4096)),
		gauge(series.DecodeSumSeqLens, stepAt(incidentLong, 60000, 200000)),
	)
}

func TestKVSaturationSeedScenarioRunawayDecode(t *testing.T) {
	f := one(t, run(t, runawayDecode(), detect.KVSaturation))
	checkCommon(t, f, detect.KVSaturation)
	if f.Layer != detect.LayerMemory || f.Severity != detect.Warning {
		t.Errorf("layer %s severity %s; want kv_memory warning", f.Layer, f.Severity)
	}
	kv := evidenceNamed(t, f, "KV cache usage, lowest")
	if !approx(kv.Value, 0.97, 1e-9) || !approx(kv.Baseline, 0.5, 1e-9) || !strings.Contains(kv.Name, "full_token_usage") {
		t.Errorf("KV evidence = %+v", kv)
	}
	out := evidenceNamed(t, f, "output tokens per finished request")
	if !approx(out.Value, 4096, 1e-6) || !approx(out.Baseline, 300, 1e-6) {
		t.Errorf("output length evidence = %+v; want 4096 vs 300", out)
	}
	contains(t, "summary", f.Summary, "runaway decode", "4096")
	// The verdict: a missing output cap, not a leak.
	contains(t, "diagnosis", f.Diagnosis, "max_new_tokens", "finish by length", "finish_reason", "not a GPU memory leak", "No retractions yet")
	if !strings.Contains(f.Emergency[0], "max_new_tokens") {
		t.Errorf("first emergency step should cap outputs: %v", f.Emergency)
	}
	if strings.Contains(f.Diagnosis, "Plain capacity") || strings.Contains(f.Diagnosis, "Deliberate retention") {
		t.Errorf("runaway decode diagnosed as another branch: %s", f.Diagnosis)
	}
	if f.Triage == "" {
		t.Error("no layer triage")
	}
}

func TestKVSaturationDiagnoses(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		severity detect.Severity
		want     []string
	}{
		// Older releases: only the per-request histogram carries output
		// lengths (--collect-tokens-histogram).
		{"runaway from the output histogram", runawayDecode().without(series.GenerationTokensTotal), detect.Warning,
			[]string{"Runaway decode", "generate 4096 tokens each", "max_new_tokens"}},
		// Runaway requests never finish: the tokenizer counters stay quiet,
		// but the decode batch's sequences keep growing at a steady batch.
		{"runaway from growing sequences", fullEngine().with(kvUsageTo(incidentLong, 0.97)...).with(
			gauge(series.DecodeSumSeqLens, stepAt(incidentLong, 60000, 160000))), detect.Warning,
			[]string{"Runaway decode", "sequences keep growing", "4000 tokens per running request (baseline 1500)"}},
		// Cached prefixes are evictable and count as free: a full pool with
		// a high hit rate is still the running requests' (see
		// TestKVSaturationHighHitRateIsNotRetention).
		{"high hit rate", fullEngine().with(kvUsageTo(incidentLong, 0.97)...).with(hitRateChange(incidentLong, 0.9)...), detect.Warning,
			[]string{"Plain capacity", "prefix hit rate is 90%", "evictable", "held by the running requests"}},
		{"plain capacity", fullEngine().with(kvUsageTo(incidentLong, 0.97)...).with(
			gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 80)),
			gauge(series.DecodeSumSeqLens, stepAt(incidentLong, 60000, 120000))), detect.Warning,
			[]string{"Plain capacity", "output lengths are normal", "80 running requests, baseline 40"}},
		{"no headroom at all: critical", fullEngine().with(kvUsageTo(incidentLong, 0.995)...), detect.Critical,
			[]string{"Plain capacity", "no headroom left"}},
		// Retractions already run: preempt_storm pages for them, this one
		// stays a warning and says so.
		{"retractions running", fullEngine().with(kvUsageTo(incidentLong, 0.995)...).with(
			counter(series.RetractedRequestsTotal, stepAt(incidentLong, 0.001, 2))), detect.Warning,
			[]string{"preempt_storm finding covers the acute effect"}},
		// Only the absolute free/evictable slots of a current release.
		{"usage from free and evictable slots", fullEngine().with(kvUsageTo(incidentLong, 0.97)...).
			without(series.TokenUsage, series.FullTokenUsage, series.NumUsedTokens), detect.Warning,
			[]string{"Plain capacity"}},
		// token_usage only (releases before full_token_usage and kv_*_tokens).
		{"token_usage only", runawayDecode().without(series.FullTokenUsage, series.KVAvailableTokens, series.KVEvictableTokens,
			series.KVUsedTokens, series.NumUsedTokens), detect.Warning, []string{"Runaway decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.KVSaturation))
			checkCommon(t, f, detect.KVSaturation)
			if f.Severity != tt.severity {
				t.Errorf("severity %s, want %s", f.Severity, tt.severity)
			}
			contains(t, "diagnosis", f.Diagnosis, tt.want...)
		})
	}
}

func TestKVSaturationDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		// A busy replica that has sat near full all along: SGLang fills its
		// pool by design.
		{"healthy heavy load", fullEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.NumQueueReqs, constant(5)),
			gauge(series.TokenUsage, constant(0.96)),
			gauge(series.FullTokenUsage, constant(0.96)),
		)},
		// Near full, but it dipped below the threshold within the range.
		{"not pinned", fullEngine().with(
			gauge(series.TokenUsage, constant(0.5)).corrupted(func(el time.Duration) (float64, bool) {
				if el < incidentLong {
					return 0, false
				}
				return []float64{0.97, 0.9}[int(el/(5*time.Second))%2], true
			}),
			gauge(series.FullTokenUsage, constant(0.5)).corrupted(func(el time.Duration) (float64, bool) {
				if el < incidentLong {
					return 0, false
				}
				return []float64{0.97, 0.9}[int(el/(5*time.Second))%2], true
			}),
		)},
		// Pinned all along and outputs 3x longer, but only a handful of
		// requests (0.02/s): below min_requests, no runaway verdict.
		{"low traffic", fullEngine().with(
			gauge(series.TokenUsage, constant(0.96)),
			gauge(series.FullTokenUsage, constant(0.96)),
			counter(series.NumRequestsTotal, constant(0.02)),
			counter(series.GenerationTokensTotal, stepAt(incidentLong, 6, 18)),
			hist(series.GenerationTokensHist, genTokBounds, constant(0.02), stepAt(incidentLong, 300, 900)),
		)},
		// Counters reset mid-range; pinned all along, outputs unchanged.
		{"counter reset after restart", func() *scenario {
			s := fullEngine().with(gauge(series.TokenUsage, constant(0.96)), gauge(series.FullTokenUsage, constant(0.96)))
			s.restarts = []time.Duration{62 * minute}
			return s
		}()},
		// Less than the range since the rise: not pinned for 5 minutes yet.
		{"rise too recent", fullEngine().with(kvUsageTo(incident, 0.97)...)},
		{"missing series", newScenario(gauge(series.NumRunningReqs, constant(4)))},
		{"NaN/Inf samples", fullEngine().with(
			gauge(series.TokenUsage, constant(0)).corrupted(always(math.NaN())),
			gauge(series.FullTokenUsage, constant(0)).corrupted(always(math.Inf(1))),
			gauge(series.NumUsedTokens, constant(0)).corrupted(always(math.NaN())),
			gauge(series.KVAvailableTokens, constant(0)).corrupted(always(math.NaN())),
			counter(series.GenerationTokensTotal, constant(3000)).corrupted(every(3, math.Inf(1))),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.KVSaturation))
		})
	}
}

// The low-traffic case is held by min_requests, not by luck.
func TestKVSaturationMinRequestsIsWhatHolds(t *testing.T) {
	s := fullEngine().with(
		gauge(series.TokenUsage, constant(0.96)),
		gauge(series.FullTokenUsage, constant(0.96)),
		counter(series.NumRequestsTotal, constant(0.02)),
		counter(series.GenerationTokensTotal, stepAt(incidentLong, 6, 18)),
	)
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.KVSaturationConfig) { s.MinRequests = 2 })
	f := one(t, detectWith(t, s, cfg, detect.KVSaturation))
	contains(t, "diagnosis", f.Diagnosis, "Runaway decode")
}

// KVSaturation's golden page (checkPage).
func TestGoldenPageEventsKVSaturation(t *testing.T) {
	checkPage(t, pageCase{class: detect.KVSaturation, scenario: runawayDecode()})
}
