package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// slowFirstToken: TTFT goes from 0.3 s to ttft where queue_latency's
// 5-minute range starts, of which queue seconds are spent in the waiting
// queue.
func slowFirstToken(ttft, queue float64) *scenario {
	return fullEngine().with(
		hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.3, ttft)),
		hist(series.QueueTimeSeconds, queueBounds, constant(10), stepAt(incidentLong, 0.05, queue)),
	)
}

// The seeds' first worked scenario: TTFT 2.8 s of which 2.3 s is queue
// wait. The fix is on the scheduling side, not the GPU.
func TestQueueLatencySeedScenarioSchedulingSide(t *testing.T) {
	s := slowFirstToken(2.8, 2.3).with(gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60)))
	f := one(t, run(t, s, detect.QueueLatency))
	checkCommon(t, f, detect.QueueLatency)
	if f.Layer != detect.LayerQueue {
		t.Errorf("layer = %s, want queue", f.Layer)
	}
	// p99 interpolates inside (2, 4]: 3.98 s against 0.398 s — 10x: critical.
	if e := evidenceNamed(t, f, "TTFT p99"); !approx(e.Value, 3.98, 1e-6) || !approx(e.Baseline, 0.398, 1e-6) || f.Severity != detect.Critical {
		t.Errorf("TTFT evidence = %+v, severity %s", e, f.Severity)
	}
	if e := evidenceNamed(t, f, "TTFT mean"); !approx(e.Value, 2.8, 1e-6) {
		t.Errorf("TTFT mean = %+v", e)
	}
	if e := evidenceNamed(t, f, "queue wait mean"); !approx(e.Value, 2.3, 1e-6) {
		t.Errorf("queue wait mean = %+v", e)
	}
	if e := evidenceNamed(t, f, "share of TTFT spent queueing"); !approx(e.Value, 2.3/2.8, 1e-6) {
		t.Errorf("queue share = %+v", e)
	}
	contains(t, "summary", f.Summary, "2.3 s of 2.8 s mean TTFT is queue wait")
	contains(t, "diagnosis", f.Diagnosis, "scheduling side", "not the GPU")
	if strings.Contains(f.Diagnosis, "Prefill layer") || strings.Contains(strings.Join(f.Emergency, " "), "profile") {
		t.Errorf("scheduling-side latency sent to prefill/profiling: %s | %v", f.Diagnosis, f.Emergency)
	}
	// 40 running (the most it ever ran) with 60 waiting: saturated.
	withTriage(t, f, detect.TriageSaturated)
}

func TestQueueLatencyVariants(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		layer    detect.Layer
		triage   detect.TriageVerdict
		want     []string
	}{
		// TTFT up but the queue wait is small: prefill itself is slow (here
		// prompts tripled).
		{"prefill slow", slowFirstToken(2.8, 0.1).with(
			counter(series.PromptTokensTotal, stepAt(incidentLong, 10000, 30000))),
			detect.LayerPrefill, detect.TriageExecution,
			[]string{"Prefill layer", "prompts got longer: 3000 tokens per request (baseline 1000)", "profile", "per_stage_req_latency_seconds"}},
		// The runbook's snapshot: 8 running, 47 waiting, KV 0.91 —
		// admission blocked by memory.
		{"admission bottleneck, KV full", slowFirstToken(2.8, 2.3).with(
			gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 8)),
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 47)),
			gauge(series.TokenUsage, stepAt(incidentLong, 0.5, 0.91)),
			gauge(series.FullTokenUsage, stepAt(incidentLong, 0.5, 0.91))),
			detect.LayerQueue, detect.TriageAdmission,
			[]string{"scheduling side", "admission bottleneck", "8 running", "47 queued"}},
		// Room left but requests wait: the scheduler's own limits.
		{"admission bottleneck, room left", slowFirstToken(2.8, 2.3).with(
			gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 8)),
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 47))),
			detect.LayerQueue, detect.TriageAdmission,
			[]string{"scheduling side"}},
		// 2025-03 and older: no queue-time histogram; the queue depth decides.
		{"old release without queue_time", slowFirstToken(2.8, 2.3).without(series.QueueTimeSeconds).with(
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60))),
			detect.LayerQueue, detect.TriageSaturated,
			[]string{"no queue-time histogram", "scheduling side"}},
		// Old TTFT buckets (the 2024 docs example).
		{"2024 TTFT buckets", slowFirstToken(2.8, 2.3).with(
			hist(series.TTFTSeconds, []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30},
				constant(10), stepAt(incidentLong, 0.3, 2.8)),
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60))),
			detect.LayerQueue, detect.TriageSaturated, []string{"scheduling side"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.QueueLatency))
			checkCommon(t, f, detect.QueueLatency)
			if f.Layer != tt.layer {
				t.Errorf("layer %s, want %s", f.Layer, tt.layer)
			}
			withTriage(t, f, tt.triage)
			// The triage is its own line on the page, beside the diagnosis.
			contains(t, "diagnosis and triage", f.Diagnosis+" "+f.Triage, tt.want...)
		})
	}
}

func TestQueueLatencyDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		{"healthy heavy load", fullEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.NumQueueReqs, constant(5)),
			hist(series.TTFTSeconds, ttftBounds, constant(30), constant(0.5)))},
		{"small rise", slowFirstToken(0.5, 0.1)},
		// Near saturation a healthy replica's TTFT is bursty: for minutes
		// the mean nearly quadruples (0.18 -> 0.67 s) and the p99 doubles
		// (1.5 -> 3 s); 2% of requests wait behind a burst.
		{"bursty tail of a busy replica", fullEngine().with(
			hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.15, 0.6)).
				withTail(0.02, stepAt(incidentLong, 1.5, 4)))},
		// 4x, but a 0.4 s p99 is no page.
		{"below the absolute floor", fullEngine().with(
			hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.1, 0.35)))},
		// 0.1 requests/s: 30 first tokens in the range.
		{"low traffic", fullEngine().with(
			hist(series.TTFTSeconds, ttftBounds, constant(0.1), stepAt(incidentLong, 0.3, 2.8)))},
		{"counter reset after restart", func() *scenario {
			s := fullEngine()
			s.restarts = []time.Duration{64 * minute}
			return s
		}()},
		{"missing series", newScenario(gauge(series.NumQueueReqs, constant(3)))},
		{"NaN/Inf samples", fullEngine().with(
			hist(series.TTFTSeconds, ttftBounds, constant(10), constant(0.3)).corrupted(every(3, math.NaN())),
			hist(series.QueueTimeSeconds, queueBounds, constant(10), constant(0.05)).corrupted(every(2, math.Inf(1))),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.QueueLatency))
		})
	}
}

// The low-traffic case is held by min_requests, not by luck.
func TestQueueLatencyMinRequestsIsWhatHolds(t *testing.T) {
	s := fullEngine().with(hist(series.TTFTSeconds, ttftBounds, constant(0.1), stepAt(incidentLong, 0.3, 2.8)))
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.QueueLatencyConfig) { s.MinRequests = 20 })
	one(t, detectWith(t, s, cfg, detect.QueueLatency))
}

// An incident that has lasted 10 minutes has put enough slow requests
// into the baseline hour to lift its p99; the mean keeps the verdict.
func TestLatencyDetectorsKeepPagingWhileTheIncidentLasts(t *testing.T) {
	t.Run("queue_latency", func(t *testing.T) {
		s := fullEngine().with(
			hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(55*minute, 0.3, 2.8)),
			hist(series.QueueTimeSeconds, queueBounds, constant(10), stepAt(55*minute, 0.05, 2.3)))
		f := one(t, run(t, s, detect.QueueLatency))
		if f.Layer != detect.LayerQueue {
			t.Errorf("layer %s", f.Layer)
		}
	})
	t.Run("decode_slowdown", func(t *testing.T) {
		s := fullEngine().with(hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(55*minute, 0.028, 0.07)))
		one(t, run(t, s, detect.DecodeSlowdown))
	})
	t.Run("lora_thrash", func(t *testing.T) {
		s := loraEngine().with(
			gauge(series.LoraPoolUtilization, stepAt(55*minute, 5.0/8, 1)),
			counter(graphs, stepAt(55*minute, 30, 15), "mode", "decode_cuda_graph"),
			counter(graphs, stepAt(55*minute, 0, 15), "mode", "decode_none"),
			hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(55*minute, 0.028, 0.055)))
		one(t, run(t, s, detect.LoraThrash))
	})
}

// The bursty-tail case is held by the ratio and the mean floor, not by
// luck: with the thresholds of a quieter service it pages.
func TestQueueLatencyBurstThresholdsAreWhatHolds(t *testing.T) {
	s := fullEngine().with(
		hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incidentLong, 0.15, 0.6)).
			withTail(0.02, stepAt(incidentLong, 1.5, 4)))
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.QueueLatencyConfig) { s.TTFTRatio, s.MinMeanTTFTSeconds = 2, 0.5 })
	one(t, detectWith(t, s, cfg, detect.QueueLatency))
}

// QueueLatency's golden page (checkPage).
func TestGoldenPageEventsQueueLatency(t *testing.T) {
	checkPage(t, pageCase{class: detect.QueueLatency, scenario: slowFirstToken(2.8, 2.3).with(gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60)))})
}

// Every step that depends on a condition is given only when the numbers
// show it: never a raised cap for a batch at its cap or a full KV pool, and
// the KV pages only when the pool is full.
func TestQueueLatencyStepsFitTheNumbers(t *testing.T) {
	kvFull := []metric{gauge(series.TokenUsage, stepAt(incidentLong, 0.5, 0.96)), gauge(series.FullTokenUsage, stepAt(incidentLong, 0.5, 0.96))}
	tests := []struct {
		name      string
		scenario  *scenario
		want, not []string
	}{
		{"at its cap", slowFirstToken(2.8, 2.3).with(gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60))),
			[]string{"Add replicas", "lacks capacity"}, []string{"--max-running-requests", "kv_saturation"}},
		{"full KV pool", slowFirstToken(2.8, 2.3).with(append(kvFull,
			gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 20)))...),
			[]string{"KV pool is full (usage up to 96%)", "kv_saturation", "do not raise --max-running-requests"}, []string{"--max-prefill-tokens", "--schedule-policy", "lower"}},
		{"below the configured cap with room", slowFirstToken(2.8, 2.3).with(gauge("sglang:max_running_requests", constant(256)),
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60)), gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 20))),
			[]string{"below its cap of 256", "cap prompt length"}, []string{"raise --max-running-requests", "kv_saturation"}},
		{"below the most it ran", slowFirstToken(2.8, 2.3).with(
			gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60)), gauge(series.NumRunningReqs, stepAt(incidentLong, 40, 20))),
			[]string{"Read the current --max-running-requests from /server_info (/get_server_info on older releases)"}, []string{"raise --max-running-requests", "kv_saturation"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.QueueLatency))
			text := f.Diagnosis + " " + strings.Join(f.Emergency, " ") + " " + strings.Join(f.RootCause, " ")
			contains(t, "page", text, tt.want...)
			for _, s := range tt.not {
				if strings.Contains(strings.Join(f.Emergency, " "), s) {
					t.Errorf("emergency steps name %q: %v", s, f.Emergency)
				}
			}
			if strings.Contains(text, "If the triage shows") {
				t.Errorf("a step left to on-call to check against the triage: %v", f.Emergency)
			}
		})
	}
}
