package detect_test

import (
	"math"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// slowDecode: inter-token latency goes from 28 ms to itl at the incident,
// with the same batch (40 running, 60k tokens).
func slowDecode(itl float64) *scenario {
	return fullEngine().with(hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, itl)))
}

func TestDecodeSlowdownPages(t *testing.T) {
	f := one(t, run(t, slowDecode(0.07), detect.DecodeSlowdown))
	checkCommon(t, f, detect.DecodeSlowdown)
	if f.Layer != detect.LayerDecode || f.Severity != detect.Warning {
		t.Errorf("layer %s severity %s; want decode warning", f.Layer, f.Severity)
	}
	// 0.07 s lies in (0.06, 0.08]: p99 0.0798 against 0.02995.
	if e := evidenceNamed(t, f, "inter-token latency p99"); !approx(e.Value, 0.0798, 1e-6) || !approx(e.Baseline, 0.02995, 1e-6) {
		t.Errorf("p99 evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "inter-token latency mean"); !approx(e.Value, 0.07, 1e-6) || !approx(e.Baseline, 0.028, 1e-6) {
		t.Errorf("mean evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "running requests"); e.Value != 40 || e.Baseline != 40 {
		t.Errorf("batch evidence = %+v", e)
	}
	contains(t, "summary", f.Summary, "unchanged batch")
	contains(t, "diagnosis", f.Diagnosis, "same size", "GPU side", "throttling", "noisy neighbour", "NVLink/PCIe", "bad node")
	contains(t, "emergency", f.Emergency[1], "nvidia-smi")
	// 40 running, 2 queued, KV half full, latency up: execution side.
	withTriage(t, f, detect.TriageExecution)
}

func TestDecodeSlowdownVariants(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		severity detect.Severity
		want     []string
	}{
		{"5x: critical", slowDecode(0.15), detect.Critical, []string{"GPU side"}},
		// Slower steps with unchanged arrivals: requests take longer, so
		// more overlap — the batch grows because of the slowdown.
		{"backlog built by the slowdown", slowDecode(0.07).with(
			gauge(series.NumRunningReqs, stepAt(incident, 40, 70)),
			gauge(series.DecodeSumSeqLens, stepAt(incident, 60000, 105000))),
			detect.Warning, []string{"arrivals are unchanged", "only because each request now takes longer"}},
		// TPOT era: sglang:time_per_output_token_seconds (mapped onto the
		// inter-token family by the scraper) with its own buckets, no
		// decode_sum_seq_lens yet.
		{"TPOT-era exposition", fullEngine().without(series.DecodeSumSeqLens).with(
			hist(series.InterTokenLatency, []float64{0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5},
				constant(300), stepAt(incident, 0.028, 0.07))),
			detect.Warning, []string{"GPU side"}},
		{"speculative acceptance collapsed", slowDecode(0.07).with(
			gauge("sglang:spec_accept_length", stepAt(incident, 3.2, 1.4))),
			detect.Warning, []string{"Speculative decoding accepts far fewer draft tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.DecodeSlowdown))
			checkCommon(t, f, detect.DecodeSlowdown)
			if f.Severity != tt.severity {
				t.Errorf("severity %s, want %s", f.Severity, tt.severity)
			}
			contains(t, "diagnosis", f.Diagnosis, tt.want...)
		})
	}
}

func TestDecodeSlowdownDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		{"healthy heavy load", fullEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.DecodeSumSeqLens, constant(384000)),
			hist(series.InterTokenLatency, itlBounds, constant(2000), constant(0.045)))},
		// Twice the arrivals, twice the batch: load, not a slowdown.
		{"batch grew with the load", slowDecode(0.07).with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST"),
			gauge(series.NumRunningReqs, stepAt(incident, 40, 80)),
			gauge(series.DecodeSumSeqLens, stepAt(incident, 60000, 120000)))},
		// Same arrivals, same running count, much longer contexts: load.
		{"longer contexts", slowDecode(0.07).with(
			gauge(series.DecodeSumSeqLens, stepAt(incident, 60000, 160000)))},
		// A preemption storm slows decode: preempt_storm pages for it.
		{"retractions", slowDecode(0.07).with(counter(series.RetractedRequestsTotal, stepAt(incident, 0.001, 2)))},
		// 5 tokens/s: 600 inter-token observations in the range.
		{"low traffic", fullEngine().with(
			hist(series.InterTokenLatency, itlBounds, constant(5), stepAt(incident, 0.028, 0.07)))},
		{"counter reset after restart", func() *scenario {
			s := fullEngine()
			s.restarts = []time.Duration{64 * minute}
			return s
		}()},
		// No batch size exposed: no telling load from a slowdown.
		{"missing running gauge", slowDecode(0.07).without(series.NumRunningReqs)},
		{"missing series", newScenario(gauge(series.NumRunningReqs, constant(4)))},
		{"NaN/Inf samples", fullEngine().with(
			hist(series.InterTokenLatency, itlBounds, constant(300), constant(0.028)).corrupted(every(3, math.Inf(1))),
			gauge(series.NumRunningReqs, constant(40)).corrupted(every(2, math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.DecodeSlowdown))
		})
	}
}

// The grown-batch case is held by the load check, not by luck: with the
// tolerance raised it pages.
func TestDecodeSlowdownLoadCheckIsWhatHolds(t *testing.T) {
	s := slowDecode(0.07).with(
		counter(series.HTTPRequestsTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST"),
		gauge(series.NumRunningReqs, stepAt(incident, 40, 80)),
		gauge(series.DecodeSumSeqLens, stepAt(incident, 60000, 120000)))
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.DecodeSlowdownConfig) { s.BatchTolerance = 1 })
	one(t, detectWith(t, s, cfg, detect.DecodeSlowdown))
}

// Decode steps share the GPU with prefill: when the prefix hit rate
// collapses, more prompt tokens are computed, every step slows — load, not
// the GPU (cache_collapse pages for the cause).
func TestDecodeSlowdownNotForMorePrefillWork(t *testing.T) {
	s := slowDecode(0.07).with(hitRateChange(incident, 0.2)...)
	none(t, run(t, s, detect.DecodeSlowdown))
	// Releases with only prompt/cached token counters tell it too.
	none(t, run(t, s.without(series.RealtimeTokensTotal, series.PrefillEffectiveTokens), detect.DecodeSlowdown))
}

// DecodeSlowdown's golden page (checkPage).
func TestGoldenPageEventsDecodeSlowdown(t *testing.T) {
	checkPage(t, pageCase{class: detect.DecodeSlowdown, scenario: slowDecode(0.07), noSingleLimit: "the p99 or the mean against the baseline"})
}
