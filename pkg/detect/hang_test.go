package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ncclHang: from at on, the scheduler loop is stuck in a collective:
// nothing is processed or finishes, every scheduler gauge keeps its last
// value (fullEngine's gauges are constant already) and clients keep 42
// requests in flight.
func ncclHang(at time.Duration) *scenario {
	return fullEngine().stopCounters(at)
}

func TestEngineHangPages(t *testing.T) {
	f := one(t, run(t, ncclHang(incident), detect.EngineHang))
	checkCommon(t, f, detect.EngineHang)
	if f.Severity != detect.Critical || f.Layer != detect.LayerProcess {
		t.Errorf("severity %s layer %s; want critical process", f.Severity, f.Layer)
	}
	if e := evidenceNamed(t, f, "tokens processed (realtime_tokens_total"); e.Value != 0 {
		t.Errorf("progress evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "tokens/s before the stall"); !approx(e.Value, 13000, 0.01) {
		t.Errorf("rate before = %+v; want 3000 prefill + 7000 cached + 3000 decode", e)
	}
	if e := evidenceNamed(t, f, "in-flight inference requests"); e.Value != 42 {
		t.Errorf("in-flight evidence = %+v", e)
	}
	contains(t, "summary", f.Summary, "42 requests in flight", "no token processed for 2m")
	contains(t, "diagnosis", f.Diagnosis, "frozen at exactly their last values", "num_running_reqs=40", "NCCL", "CPU counter did not move")
	steps := strings.Join(f.Emergency, " ")
	contains(t, "emergency steps", steps, "py-spy dump", "NCCL_DEBUG=INFO", "nvidia-smi topo -m", "restart")
	contains(t, "root-cause steps", strings.Join(f.RootCause, " "), "NCCL_ASYNC_ERROR_HANDLING", "MTU", "CUDA")
}

func TestEngineHangVariants(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		want     []string
	}{
		// Before realtime_tokens_total: finished-request counters over the
		// longer fallback range, confirmed by the frozen gauges.
		{"old release: fallback counters", ncclHang(incidentLong).without(series.RealtimeTokensTotal),
			[]string{"nothing finished for 5m", "no per-iteration progress counter", "frozen"}},
		// The active probe alone: nobody calls the replica, but it cannot
		// generate the one token /health_generate asks for.
		{"probe fails on an idle replica", fullEngine().stopCounters(incident).with(
			gauge(series.HTTPRequestsActive, constant(0), "endpoint", chat, "method", "POST"),
			gauge(series.NumRunningReqs, constant(0)),
			gauge(detect.HealthProbeUp, stepAt(incident, 1, 0)),
			gauge(detect.HealthProbeDuration, stepAt(incident, 0.05, 20))),
			[]string{"every /health_generate probe in the last 2m failed"}},
		// Old release, long silence, no frozen gauges but the probe fails.
		{"old release: probe confirms", ncclHang(incidentLong).without(series.RealtimeTokensTotal).with(
			gauge(series.GenThroughput, func(el time.Duration) float64 { return 3000 + float64(el%7) }),
			gauge(detect.HealthProbeUp, stepAt(incidentLong, 1, 0))),
			[]string{"nothing finished for 5m", "probe failed as well"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.EngineHang))
			checkCommon(t, f, detect.EngineHang)
			contains(t, "summary+diagnosis", f.Summary+" "+f.Diagnosis, tt.want...)
		})
	}
}

func TestEngineHangDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		{"healthy heavy load", fullEngine().with(gauge(series.NumRunningReqs, constant(256)), gauge(series.NumQueueReqs, constant(5)))},
		// Nothing in flight, nothing processed: an idle replica is not hung.
		{"idle", fullEngine().stopCounters(30*minute).with(
			gauge(series.HTTPRequestsActive, stepAt(30*minute, 42, 0), "endpoint", chat, "method", "POST"),
			gauge(series.NumRunningReqs, stepAt(30*minute, 40, 0)),
			gauge(series.NumQueueReqs, stepAt(30*minute, 2, 0)),
			gauge(series.GenThroughput, stepAt(30*minute, 3000, 0)))},
		// A short request now and then, nothing counted in between: in
		// flight only part of the range is not "requests waiting on it".
		{"low traffic", fullEngine().stopCounters(incident).with(
			gauge(series.HTTPRequestsActive, func(el time.Duration) float64 { return float64(int(el/(5*time.Second)) % 2) }, "endpoint", chat, "method", "POST"),
			gauge(series.NumRunningReqs, func(el time.Duration) float64 { return float64(int(el/(5*time.Second)) % 2) }))},
		// The scrape itself fails: replica_down's, whatever the counters did.
		{"scrape fails", func() *scenario {
			s := ncclHang(incident)
			s.failures = []failure{{from: 64 * minute, to: s.length, reason: "timeout", error: "context deadline exceeded"}}
			return s
		}()},
		// A restart in the range resets the counters; after it the engine
		// works again.
		{"counter reset after restart", func() *scenario {
			s := fullEngine()
			s.restarts = []time.Duration{64 * minute}
			return s
		}()},
		// A restart followed by no progress is a cold start, not a hang.
		{"restart then nothing", func() *scenario {
			s := fullEngine().stopCounters(55 * minute)
			s.restarts = []time.Duration{55 * minute}
			return s
		}()},
		// The counters stalled (a metrics glitch) but the engine answered
		// the probe within the range: not stuck.
		{"probe answers", ncclHang(incident).with(gauge(detect.HealthProbeUp, constant(1)))},
		// Old release: no completions for 5 minutes (long generations), but
		// the scheduler gauges move, no probe failure, CPU busy.
		{"old release: long generations", fullEngine().without(series.RealtimeTokensTotal).with(
			counter(series.NumRequestsTotal, stepAt(incidentLong, 10, 0)),
			counter(series.GenerationTokensTotal, stepAt(incidentLong, 3000, 0)),
			gauge(series.GenThroughput, func(el time.Duration) float64 { return 3000 + float64(el%7) }))},
		{"missing series", newScenario(gauge(series.NumRunningReqs, constant(4)))},
		{"NaN/Inf samples", fullEngine().with(
			counter(series.RealtimeTokensTotal, constant(3000), "mode", "decode").corrupted(every(3, math.NaN())),
			counter(series.RealtimeTokensTotal, constant(3000), "mode", "prefill_compute").corrupted(every(2, math.Inf(1))),
			gauge(series.HTTPRequestsActive, constant(42), "endpoint", chat, "method", "POST").corrupted(always(math.NaN())),
			gauge(detect.HealthProbeUp, constant(1)).corrupted(always(math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.EngineHang))
		})
	}
}

// A hang seen from a freshly started watchdog: the replica served long
// before (its counters are high), so it is a hang, not a cold start.
func TestEngineHangSeenByANewWatchdog(t *testing.T) {
	s := ncclHang(0)
	s.length = 5 * time.Minute
	f := one(t, run(t, s, detect.EngineHang))
	if f.Class != detect.EngineHang {
		t.Fatal(f.Class)
	}
	none(t, run(t, s, detect.ColdStart))
}

// EngineHang's golden page (checkPage).
func TestGoldenPageEventsEngineHang(t *testing.T) {
	checkPage(t, pageCase{class: detect.EngineHang, scenario: ncclHang(incident)})
}

// The hang's steps take the replica out of rotation before anything else
// and restart it last, saying what the restart drops; the diagnosis names
// SGLang's own watchdog, which crashes a stuck forward batch.
func TestEngineHangStepsOrder(t *testing.T) {
	f := one(t, run(t, ncclHang(incident), detect.EngineHang))
	if !strings.Contains(f.Emergency[0], "out of rotation") {
		t.Errorf("first step %q, want the replica out of rotation", f.Emergency[0])
	}
	last := f.Emergency[len(f.Emergency)-1]
	for i, s := range f.Emergency[:len(f.Emergency)-1] {
		if strings.Contains(s, "restart") && !strings.Contains(s, "Before restarting") {
			t.Errorf("step %d restarts before the last: %q", i, s)
		}
	}
	contains(t, "restart step", last, "restart it", "drops the 42 requests in flight")
	contains(t, "diagnosis", f.Diagnosis, "--watchdog-timeout (default 300 s)")
}
