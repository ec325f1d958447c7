package detect_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestMetricsBlind404(t *testing.T) {
	s := failingFor(3, series.FailureHTTPStatus, "HTTP 404 Not Found")
	s.failures[0].status = 404
	f := one(t, run(t, s, detect.MetricsBlind))
	checkCommon(t, f, detect.MetricsBlind)
	if f.Severity != detect.Warning || f.Layer != detect.LayerTransport {
		t.Errorf("severity %s layer %s; want warning scrape", f.Severity, f.Layer)
	}
	// Every enabled detector with core needs; lora_thrash and
	// pd_transfer_failure only apply where their feature is on.
	if e := evidenceNamed(t, f, "detectors blind on this replica"); e.Value < 8 {
		t.Errorf("blind count = %+v", e)
	}
	contains(t, "summary", f.Summary, "404")
	contains(t, "diagnosis", f.Diagnosis, "--enable-metrics", "HTTP 404 Not Found", "preempt_storm", "cache_collapse",
		"retry_avalanche", "kv_saturation", "engine_hang", "queue_latency", "decode_slowdown", "cold_start")
	// The server answers: no outage page beside it.
	none(t, run(t, s, detect.ReplicaDown))
	// The decision reads the status, not the text.
	s.failures[0].error = "Not Found"
	contains(t, "diagnosis", one(t, run(t, s, detect.MetricsBlind)).Diagnosis, "--enable-metrics")
}

// withNeeds are the classes of the registry that need some family.
func withNeeds() []detect.Class {
	var out []detect.Class
	for _, e := range detect.Registry() {
		if len(e.Signals()) > 0 {
			out = append(out, e.Class())
		}
	}
	return out
}

func TestMetricsBlindMissingFamilies(t *testing.T) {
	// lora_thrash and pd_transfer_failure read their families only where
	// the feature is on, so they never need one.
	if got := withNeeds(); !slices.Contains(got, detect.PreemptStorm) || slices.Contains(got, detect.LoraThrash) || slices.Contains(got, detect.PDTransferFailure) {
		t.Fatalf("detectors with needs: %v", got)
	}
	tests := []struct {
		name     string
		scenario *scenario
		blind    []detect.Class
	}{
		// Before the retraction gauge (mid-2025) and counter (late 2025).
		{"no retraction families", fullEngine().without(series.RetractedRequestsTotal, series.NumRetractedReqsGauge,
			series.RetractedInputTokens, series.RetractedOutputTokens), []detect.Class{detect.PreemptStorm}},
		// Prompt tokens but no cached-token counter, no realtime or
		// prefill-effective counters, and not even the per-batch gauge
		// late-2024 releases fall back on.
		{"no hit-rate counters", fullEngine().without(series.PrefillEffectiveTokens, series.RealtimeTokensTotal, series.CachedTokensTotal, series.CacheHitRateGauge),
			[]detect.Class{detect.CacheCollapse}},
		{"no HTTP arrival counter", fullEngine().without(series.HTTPRequestsTotal), []detect.Class{detect.RetryAvalanche}},
		{"no progress counters", fullEngine().without(series.RealtimeTokensTotal, series.GenerationTokensTotal, series.NumRequestsTotal),
			[]detect.Class{detect.EngineHang, detect.ColdStart}},
		{"no latency histograms", fullEngine().without(series.TTFTSeconds, series.InterTokenLatency),
			[]detect.Class{detect.QueueLatency, detect.DecodeSlowdown}},
		// A proxy re-rendering every name: nothing the watchdog knows, so
		// every detector that needs a family is blind.
		{"renamed families", newScenario(
			gauge("proxy_sglang_num_running_reqs", constant(40)),
			counter("proxy_sglang_num_requests_total", constant(10))),
			withNeeds()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.MetricsBlind))
			checkCommon(t, f, detect.MetricsBlind)
			if f.Severity != detect.Warning {
				t.Errorf("severity %s", f.Severity)
			}
			if e := evidenceNamed(t, f, "detectors blind"); int(e.Value) != len(tt.blind) {
				t.Errorf("blind count %v, want %d: %s", e.Value, len(tt.blind), f.Summary)
			}
			for _, c := range tt.blind {
				evidenceNamed(t, f, "blind: "+string(c))
				contains(t, "summary", f.Summary, string(c))
			}
		})
	}
}

func TestMetricsBlindDoesNotReport(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		// The older core set: no LoRA, PD, speculative or probe families, no
		// realtime/prefill-effective counters — every detector still has a
		// source.
		{"older release, features off", healthyEngine().without(series.PrefillEffectiveTokens, series.RealtimeTokensTotal,
			series.RetractedRequestsTotal, series.FullTokenUsage)},
		{"healthy heavy load", fullEngine().with(gauge(series.NumRunningReqs, constant(256)), gauge(series.NumQueueReqs, constant(5)))},
		// A new idle replica: tokenizer families appear only with the first
		// finished request; nothing ran, so nothing is judged.
		{"idle, no tokenizer families yet", newScenario(
			gauge(series.NumRunningReqs, constant(0)),
			gauge(series.NumQueueReqs, constant(0)),
			gauge(series.TokenUsage, constant(0)),
			gauge(series.NumRetractedReqsGauge, constant(0)),
			counter(series.HTTPRequestsTotal, constant(0.2), "endpoint", "/metrics", "method", "GET"))},
		// Families missing on a replica seen for a minute: within the grace.
		{"within the grace", func() *scenario {
			s := fullEngine().without(series.RetractedRequestsTotal, series.NumRetractedReqsGauge)
			s.length = time.Minute
			return s
		}()},
		// PD prefill server: no TTFT/ITL histograms, no retractions there.
		{"PD prefill server", func() *scenario {
			s := fullEngine().without(series.TTFTSeconds, series.InterTokenLatency,
				series.RetractedRequestsTotal, series.NumRetractedReqsGauge)
			s.engineType = "prefill"
			return s
		}()},
		{"one 404", failingFor(1, series.FailureHTTPStatus, "HTTP 404 Not Found")},
		{"unreachable server", failingFor(5, series.FailureTimeout, "context deadline exceeded")},
		{"counter reset after restart", func() *scenario {
			s := fullEngine()
			s.restarts = []time.Duration{60 * minute}
			return s
		}()},
		{"gateway", func() *scenario {
			s := newScenario(
				counter(series.GatewayHTTPRequestsTotal, constant(10), "method", "POST", "path", chat),
				counter(series.GatewayHTTPResponsesTotal, constant(10), "path", chat, "status_code", "200"),
				counter(series.GatewayRetriesTotal, constant(0.1)))
			s.kind, s.model = "gateway", ""
			return s
		}()},
		{"NaN/Inf samples", fullEngine().with(
			counter(series.RetractedRequestsTotal, constant(0.001)).corrupted(every(2, math.NaN())),
			gauge(series.NumRetractedReqsGauge, constant(0), "pid", "4242").corrupted(every(3, math.Inf(1))),
			gauge(series.TokenUsage, constant(0.5)).corrupted(every(2, math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.MetricsBlind))
		})
	}
}

// Disabled detectors are not reported blind.
func TestMetricsBlindOnlyCountsEnabledDetectors(t *testing.T) {
	s := fullEngine().without(series.RetractedRequestsTotal, series.NumRetractedReqsGauge)
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) { s.Enabled = false })
	none(t, detectWith(t, s, cfg, detect.MetricsBlind))
	f := one(t, run(t, s, detect.MetricsBlind))
	if !strings.Contains(f.Diagnosis, "retraction") {
		t.Errorf("diagnosis = %s", f.Diagnosis)
	}
}

// MetricsBlind's golden page (checkPage): a target answering 404.
func TestGoldenPageEventsMetricsBlind(t *testing.T) {
	s := failingFor(3, "http_status", "HTTP 404 Not Found")
	for i := range s.failures {
		s.failures[i].status = 404
	}
	checkPage(t, pageCase{class: detect.MetricsBlind, scenario: s})
}
