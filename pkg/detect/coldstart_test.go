package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// restartedNotServing: the replica restarts at at and, from then on,
// answers /metrics but processes nothing: requests pile up in its queue
// and /health_generate answers 503. Its startup breakdown is exposed.
func restartedNotServing(at time.Duration) *scenario {
	s := fullEngine().stopCounters(at).with(
		gauge(series.NumRunningReqs, stepAt(at, 40, 0)),
		gauge(series.NumQueueReqs, stepAt(at, 2, 20)),
		gauge(series.HTTPRequestsActive, stepAt(at, 42, 20), "endpoint", chat, "method", "POST"),
		gauge(detect.HealthProbeUp, stepAt(at, 1, 0)),
		gauge(series.StartupTimeSeconds, stepAt(at, 0, 420), "phase", "load_weight"),
		gauge(series.StartupTimeSeconds, stepAt(at, 0, 15), "phase", "kv_cache_allocation"),
		gauge("sglang:startup_cuda_graph_time_seconds", stepAt(at, 0, 75)),
	)
	s.restarts = []time.Duration{at}
	return s
}

// newReplica is a replica that refuses connections while it loads (the
// first refusedFor), then answers /metrics but never becomes ready.
func newReplica(refusedFor, length time.Duration) *scenario {
	s := fullEngine().stopCounters(0).with(
		gauge(series.NumRunningReqs, constant(0)),
		gauge(series.NumQueueReqs, constant(0)),
		gauge(series.HTTPRequestsActive, constant(0), "endpoint", chat, "method", "POST"),
		gauge(series.GenThroughput, constant(0)),
		gauge(detect.HealthProbeUp, constant(0)),
	)
	for i := range s.metrics {
		s.metrics[i].init = 0 // a fresh process
	}
	s.length = length
	s.failures = []failure{{from: 0, to: refusedFor, reason: series.FailureRefused, error: "connection refused"}}
	return s
}

func TestColdStartAfterRestart(t *testing.T) {
	f := one(t, run(t, restartedNotServing(50*minute), detect.ColdStart))
	checkCommon(t, f, detect.ColdStart)
	if f.Severity != detect.Warning || f.Layer != detect.LayerProcess {
		t.Errorf("severity %s layer %s; want warning process", f.Severity, f.Layer)
	}
	if e := evidenceNamed(t, f, "seconds since the replica restarted"); e.Value != 900 {
		t.Errorf("age evidence = %+v", e)
	}
	if e := evidenceNamed(t, f, "startup phase load_weight"); e.Value != 420 {
		t.Errorf("phase evidence = %+v", e)
	}
	contains(t, "summary", f.Summary, "restarted 15m ago", "not serving")
	contains(t, "diagnosis", f.Diagnosis, "every /health_generate probe since then failed", "requests have been waiting",
		"load_weight 420 s, cuda_graph_capture 75 s, kv_cache_allocation 15 s")
	contains(t, "steps", strings.Join(append(f.Emergency, f.RootCause...), " "),
		"warm pool", "over-provision", "ramdisk", "--cuda-graph-bs", "pre-built")
	// The restart itself is replica_restarted's warning (no outage, no
	// replica_down page); the cold start is explained by it, one incident.
	none(t, run(t, restartedNotServing(50*minute), detect.ReplicaDown))
	restarted := one(t, run(t, restartedNotServing(50*minute), detect.ReplicaRestarted))
	if !detect.Explains(restarted, f) {
		t.Errorf("the restart does not explain the cold start")
	}
	none(t, run(t, restartedNotServing(50*minute), detect.EngineHang))
}

func TestColdStartVariants(t *testing.T) {
	t.Run("critical past critical_after", func(t *testing.T) {
		f := one(t, run(t, restartedNotServing(40*minute), detect.ColdStart))
		if f.Severity != detect.Critical {
			t.Errorf("severity %s", f.Severity)
		}
	})
	// A new replica: refused while loading, then up for 12 minutes without
	// ever answering /health_generate. No traffic reaches it (not ready).
	t.Run("new replica never ready", func(t *testing.T) {
		s := newReplica(4*minute, 16*minute)
		f := one(t, run(t, s, detect.ColdStart))
		checkCommon(t, f, detect.ColdStart)
		contains(t, "summary", f.Summary, "was first seen 16m ago")
		// Up now: replica_down has nothing to add; not a hang either.
		none(t, run(t, s, detect.ReplicaDown))
		none(t, run(t, s, detect.EngineHang))
	})
	// No probe configured: the waiting requests alone say it.
	t.Run("demand without probe", func(t *testing.T) {
		f := one(t, run(t, restartedNotServing(50*minute).without(detect.HealthProbeUp), detect.ColdStart))
		contains(t, "diagnosis", f.Diagnosis, "requests have been waiting")
	})
}

func TestColdStartDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", fullEngine()},
		{"healthy heavy load", fullEngine().with(gauge(series.NumRunningReqs, constant(256)), gauge(series.NumQueueReqs, constant(5)))},
		// Restarted and serving again right away.
		{"counter reset after restart", func() *scenario {
			s := fullEngine()
			s.restarts = []time.Duration{55 * minute}
			return s
		}()},
		{"within the startup budget", restartedNotServing(58 * minute)},
		// Refusing connections within the startup budget: still loading.
		{"never reachable within the budget", func() *scenario {
			s := fullEngine()
			s.length = 14 * minute
			s.failures = []failure{{from: 0, to: s.length, reason: series.FailureRefused, error: "connection refused"}}
			return s
		}()},
		// A broken metrics endpoint is metrics_blind's, whatever its age.
		{"metrics answer 500 all along", func() *scenario {
			s := fullEngine()
			s.failures = []failure{{from: 0, to: s.length, reason: series.FailureHTTPStatus, status: 500, error: "HTTP 500"}}
			return s
		}()},
		// Long-running replica the watchdog just met, idle: it served before
		// (its counters say so), nothing waits, the probe answers.
		{"long-running idle replica, new watchdog", func() *scenario {
			s := fullEngine().stopCounters(0).with(
				gauge(series.NumRunningReqs, constant(0)), gauge(series.NumQueueReqs, constant(0)),
				gauge(series.HTTPRequestsActive, constant(0), "endpoint", chat, "method", "POST"),
				gauge(detect.HealthProbeUp, constant(1)))
			s.length = 20 * minute
			return s
		}()},
		// Long-running replica stuck with requests waiting, seen by a new
		// watchdog: engine_hang's (it has served before).
		{"long-running stuck replica, new watchdog", func() *scenario {
			s := fullEngine().stopCounters(0)
			s.length = 20 * minute
			return s
		}()},
		// Restarted, nothing to serve, no probe: nothing says it is not ready.
		{"low traffic: restart, no demand", restartedNotServing(50*minute).without(detect.HealthProbeUp).with(
			gauge(series.NumQueueReqs, constant(0)),
			gauge(series.HTTPRequestsActive, constant(0), "endpoint", chat, "method", "POST"))},
		// One request arriving at the last scrape is not lasting demand.
		{"demand blip", restartedNotServing(50*minute).without(detect.HealthProbeUp).with(
			gauge(series.NumQueueReqs, stepAt(65*minute, 0, 1)),
			gauge(series.HTTPRequestsActive, stepAt(65*minute, 0, 1), "endpoint", chat, "method", "POST"))},
		{"missing series", newScenario(gauge(series.NumRunningReqs, constant(4)))},
		{"NaN/Inf samples", fullEngine().with(
			gauge(detect.HealthProbeUp, constant(1)).corrupted(every(2, math.NaN())),
			gauge(series.NumQueueReqs, constant(2)).corrupted(always(math.Inf(1))),
			counter(series.NumRequestsTotal, constant(10)).corrupted(every(3, math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.ColdStart))
		})
	}
}

// ColdStart's golden page (checkPage).
func TestGoldenPageEventsColdStart(t *testing.T) {
	checkPage(t, pageCase{class: detect.ColdStart, scenario: newReplica(4*time.Minute, 16*time.Minute)})
}
