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

// preemptStorm scripts a KV preemption cascade from the incident time:
// retractions at rate/s, the pool full, decode slowing, aborts and a queue.
func preemptStorm(rate float64) *scenario {
	return healthyEngine().with(
		counter(series.RetractedRequestsTotal, stepAt(incident, 0.001, rate)),
		counter(series.RetractedInputTokens, stepAt(incident, 1, rate*2000)),
		counter(series.RetractedOutputTokens, stepAt(incident, 0.5, rate*300)),
		gauge(series.TokenUsage, stepAt(incident, 0.5, 0.97)),
		gauge(series.FullTokenUsage, stepAt(incident, 0.5, 0.97)),
		hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, 0.7)),
		counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 0.5)),
		gauge(series.NumQueueReqs, stepAt(incident, 2, 60)),
	)
}

func TestPreemptStormPages(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		severity detect.Severity
		rate     float64
	}{
		{"storm", preemptStorm(2), detect.Critical, 2},
		{"moderate storm", preemptStorm(0.3), detect.Warning, 0.3},
		// Only the full pool's usage in tokens is exposed (older release).
		{"usage from used/max tokens", preemptStorm(2).without(series.TokenUsage, series.FullTokenUsage).
			with(gauge(series.NumUsedTokens, stepAt(incident, 200000, 390000))), detect.Critical, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.PreemptStorm))
			checkCommon(t, f, detect.PreemptStorm)
			if f.Severity != tt.severity || f.Layer != detect.LayerMemory {
				t.Errorf("severity %s layer %s; want %s kv_memory", f.Severity, f.Layer, tt.severity)
			}
			e := evidenceNamed(t, f, "retracted requests/s")
			if !approx(e.Value, tt.rate, 0.02) || !e.HasBaseline || !approx(e.Baseline, 0.001, 0.02) {
				t.Errorf("retraction evidence = %+v; want %v/s vs baseline 0.001/s", e, tt.rate)
			}
			if kv := evidenceNamed(t, f, "KV cache usage"); kv.Value < 0.96 {
				t.Errorf("KV usage evidence = %v", kv.Value)
			}
			itl := evidenceNamed(t, f, "inter-token latency p99")
			// All observations at 0.7 s lie in (0.6, 0.8]; p99 interpolates to
			// 0.6 + 0.2×0.99 = 0.798. The baseline (0.028 s in (0.025, 0.03])
			// gives 0.025 + 0.005×0.99.
			if !approx(itl.Value, 0.798, 1e-6) || !approx(itl.Baseline, 0.02995, 1e-6) {
				t.Errorf("ITL p99 evidence = %+v", itl)
			}
			if q := evidenceNamed(t, f, "queued requests"); q.Value != 60 || q.Baseline != 2 {
				t.Errorf("queue evidence = %+v", q)
			}
			if a := evidenceNamed(t, f, "aborted requests/s"); !approx(a.Value, 0.5, 0.02) {
				t.Errorf("aborts evidence = %+v", a)
			}
			if c := evidenceNamed(t, f, "retracted tokens/s"); !approx(c.Value, tt.rate*2300, 0.02) {
				t.Errorf("recompute cost evidence = %+v", c)
			}
			if !strings.Contains(f.Diagnosis, "retracting running requests") || !strings.Contains(strings.Join(f.Emergency, " "), "--max-running-requests") {
				t.Errorf("diagnosis/emergency: %s | %v", f.Diagnosis, f.Emergency)
			}
		})
	}
}

// Old releases only have the lossy gauge: non-zero in several scrapes.
func TestPreemptStormLegacyGauge(t *testing.T) {
	s := healthyEngine().without(series.RetractedRequestsTotal, series.RetractedInputTokens, series.RetractedOutputTokens).
		with(
			gauge(series.NumRetractedReqsGauge, constant(0), "pid", "4242").corrupted(func(el time.Duration) (float64, bool) {
				// From the incident on, every other scrape reports 3 retractions.
				return 3, el >= incident && int(el.Seconds()/5)%2 == 0
			}),
			gauge(series.TokenUsage, stepAt(incident, 0.5, 0.98)),
			gauge(series.FullTokenUsage, stepAt(incident, 0.5, 0.98)),
		)
	f := one(t, run(t, s, detect.PreemptStorm))
	checkCommon(t, f, detect.PreemptStorm)
	if f.Severity != detect.Warning || f.Layer != detect.LayerMemory {
		t.Errorf("severity %s layer %s", f.Severity, f.Layer)
	}
	// 2 minutes = 24 scrapes in (63m, 65m], every other one non-zero.
	if e := evidenceNamed(t, f, "scrapes with retractions"); e.Value != 12 {
		t.Errorf("legacy evidence = %+v, want 12 scrapes", e)
	}
	if !strings.Contains(f.Diagnosis, "KV cache pool is full. Retract requests.") {
		t.Errorf("legacy diagnosis should point at the log line: %s", f.Diagnosis)
	}
}

func TestPreemptStormDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", healthyEngine()},
		// Running pinned at max, a short stable queue, a full pool but no
		// retractions: the server is simply busy.
		{"healthy heavy load", healthyEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.NumQueueReqs, constant(5)),
			gauge(series.TokenUsage, constant(0.96)),
			gauge(series.FullTokenUsage, constant(0.96)),
			counter(series.RetractedRequestsTotal, constant(0)),
		)},
		// Three retractions in two minutes: below the absolute floor.
		{"low traffic", healthyEngine().with(
			counter(series.RetractedRequestsTotal, stepAt(incident, 0, 0.025)),
			gauge(series.TokenUsage, constant(0.95)),
			gauge(series.FullTokenUsage, constant(0.95)),
		)},
		// A restart resets the counter from 1e6 to 0: not a spike.
		{"counter reset after restart", func() *scenario {
			s := healthyEngine().with(counter(series.RetractedRequestsTotal, constant(0.05)),
				gauge(series.TokenUsage, constant(0.95)), gauge(series.FullTokenUsage, constant(0.95)))
			s.restarts = []time.Duration{63*minute + 30*time.Second}
			return s
		}()},
		{"retractions with KV usage low", preemptStorm(2).with(
			gauge(series.TokenUsage, constant(0.5)), gauge(series.FullTokenUsage, constant(0.5)))},
		// Always retracting at about the same rate: not a storm, a steady state.
		{"no rise over baseline", healthyEngine().with(
			counter(series.RetractedRequestsTotal, stepAt(incident, 0.5, 0.6)),
			gauge(series.TokenUsage, constant(0.97)), gauge(series.FullTokenUsage, constant(0.97)))},
		{"missing series", newScenario(gauge("sglang:unrelated", constant(1)))},
		{"NaN/Inf samples", healthyEngine().with(
			counter(series.RetractedRequestsTotal, constant(0.001)).corrupted(every(3, math.Inf(1))),
			gauge(series.TokenUsage, constant(0)).corrupted(always(math.NaN())),
			gauge(series.FullTokenUsage, constant(0)).corrupted(always(math.Inf(1))),
			gauge(series.NumRetractedReqsGauge, constant(0), "pid", "4242").corrupted(always(math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.PreemptStorm))
		})
	}
}

// The low-traffic case is held by the absolute floor, not by luck: with the
// floor lowered it pages.
func TestPreemptStormFloorIsWhatHolds(t *testing.T) {
	s := healthyEngine().with(
		counter(series.RetractedRequestsTotal, stepAt(incident, 0, 0.025)),
		gauge(series.TokenUsage, constant(0.95)),
		gauge(series.FullTokenUsage, constant(0.95)),
	)
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) {
		s.MinRetractionsPerSecond, s.MinRetractionShare, s.CriticalRetractionsPerSecond = 0.01, 0, 1
	})
	one(t, detectWith(t, s, cfg, detect.PreemptStorm))
}

// PreemptStorm's golden page (checkPage).
func TestGoldenPageEventsPreemptStorm(t *testing.T) {
	checkPage(t, pageCase{class: detect.PreemptStorm, scenario: preemptStorm(2)})
}

// The storm's steps stop the harm without dropping work first; the restart
// comes last, says what it drops (counted from the gauges) and where the
// current value is read, and offers SGLang's admission reserve.
func TestPreemptStormStepsOrder(t *testing.T) {
	s := preemptStorm(2).with(gauge(series.NumQueueReqs, stepAt(incident, 2, 300)), gauge(series.NumRunningReqs, constant(70)))
	f := one(t, run(t, s, detect.PreemptStorm))
	restart := slices.IndexFunc(f.Emergency, func(s string) bool { return strings.Contains(s, "restart") })
	rotation := slices.IndexFunc(f.Emergency, func(s string) bool { return strings.Contains(s, "out of rotation") })
	if restart < 0 || rotation < 0 || rotation > restart || restart != len(f.Emergency)-1 {
		t.Fatalf("want the non-destructive steps first and the restart last: %q", f.Emergency)
	}
	contains(t, "restart step", f.Emergency[restart], "drops the 370 queued and running requests it holds now (300 queued, 70 running",
		"/server_info (/get_server_info on older releases)", "--max-running-requests", "--schedule-conservativeness (default 1.0; a larger value admits fewer requests")
}

// Inter-token latency that fell during the storm (fewer requests left
// running) is not offered as support for it.
func TestPreemptStormFallingITLIsNotEvidence(t *testing.T) {
	s := preemptStorm(2).with(hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.187, 0.035)))
	f := one(t, run(t, s, detect.PreemptStorm))
	for _, e := range f.Evidence {
		if strings.HasPrefix(e.Name, "inter-token latency") {
			t.Errorf("falling ITL offered as evidence: %+v", e)
		}
	}
	if strings.Contains(f.Diagnosis, "Inter-token latency") {
		t.Errorf("falling ITL in the diagnosis: %s", f.Diagnosis)
	}
}
