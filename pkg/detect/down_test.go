package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// failingFor makes the last n scrapes of a healthy replica fail.
func failingFor(n int, reason series.ScrapeFailure, text string) *scenario {
	s := healthyEngine()
	s.failures = []failure{{from: s.length - time.Duration(n-1)*s.step, to: s.length, reason: reason, error: text}}
	return s
}

func TestReplicaDownScrapeFailures(t *testing.T) {
	tests := []struct {
		reason, text string
		layer        detect.Layer
		diagnosis    string
	}{
		{"refused", "dial tcp 10.0.0.7:30000: connect: connection refused", detect.LayerProcess, "OOM-killed"},
		{"timeout", "context deadline exceeded", detect.LayerProcess, "hung"},
		{"http_status", "HTTP 404 Not Found", detect.LayerTransport, "--enable-metrics"},
		{"http_status", "HTTP 502 Bad Gateway", detect.LayerTransport, "proxy"},
		{"parse_error", "text format parsing error in line 3", detect.LayerTransport, "not with Prometheus text"},
		{"too_many_series", "over 20000 series", detect.LayerTransport, "fan-out"},
		{"error", "lookup sglang-0: no such host", detect.LayerTransport, "DNS"},
	}
	for _, tt := range tests {
		t.Run(tt.reason+" "+tt.text, func(t *testing.T) {
			f := one(t, run(t, failingFor(4, series.ScrapeFailure(tt.reason), tt.text), detect.ReplicaDown))
			checkCommon(t, f, detect.ReplicaDown)
			if f.Severity != detect.Critical || f.Layer != tt.layer {
				t.Errorf("severity %s layer %s; want critical %s", f.Severity, f.Layer, tt.layer)
			}
			if e := evidenceNamed(t, f, "consecutive failed scrapes"); e.Value != 4 {
				t.Errorf("failures evidence = %+v", e)
			}
			// Last success: the scrape before the four failures, 20 s ago.
			if e := evidenceNamed(t, f, "seconds since last successful scrape"); e.Value != 20 {
				t.Errorf("last success evidence = %+v", e)
			}
			if !strings.Contains(f.Diagnosis, tt.diagnosis) || !strings.Contains(f.Diagnosis, tt.text) {
				t.Errorf("diagnosis lacks %q or the error text: %s", tt.diagnosis, f.Diagnosis)
			}
			if !strings.Contains(f.Summary, tt.reason) {
				t.Errorf("summary = %s", f.Summary)
			}
		})
	}
}

func TestReplicaDownNeverReachable(t *testing.T) {
	s := healthyEngine()
	s.failures = []failure{{from: 0, to: s.length, reason: "refused", error: "connection refused"}}
	f := one(t, run(t, s, detect.ReplicaDown))
	if f.Severity != detect.Critical || !strings.Contains(f.Summary, "never scraped successfully") {
		t.Errorf("finding = %s: %s", f.Severity, f.Summary)
	}
	if f.Model != "" {
		t.Errorf("model %q for a replica never scraped", f.Model)
	}
	// Metric detectors have nothing to say about a replica without data.
	for _, c := range []detect.Class{detect.PreemptStorm, detect.RetryAvalanche, detect.CacheCollapse} {
		none(t, run(t, s, c))
	}
}

func TestReplicaDownRestarts(t *testing.T) {
	t.Run("one restart: warning", func(t *testing.T) {
		s := healthyEngine()
		s.restarts = []time.Duration{55 * minute}
		f := one(t, run(t, s, detect.ReplicaDown))
		checkCommon(t, f, detect.ReplicaDown)
		if f.Severity != detect.Warning || f.Layer != detect.LayerProcess || !strings.Contains(f.Summary, "restarted") {
			t.Errorf("finding = %s %s %s", f.Severity, f.Layer, f.Summary)
		}
		if e := evidenceNamed(t, f, "seconds since last restart"); e.Value != 600 {
			t.Errorf("restart age evidence = %+v", e)
		}
		if !strings.Contains(strings.Join(f.Emergency, " "), "OOMKilled") {
			t.Errorf("emergency steps lack the OOMKilled check: %v", f.Emergency)
		}
	})
	t.Run("crash loop: critical", func(t *testing.T) {
		s := healthyEngine()
		s.restarts = []time.Duration{40 * minute, 50 * minute, 60 * minute}
		// Down for a few scrapes around each restart, as a crashing pod is.
		for _, r := range s.restarts {
			s.failures = append(s.failures, failure{from: r - 20*time.Second, to: r - 5*time.Second, reason: "refused", error: "connection refused"})
		}
		f := one(t, run(t, s, detect.ReplicaDown))
		if f.Severity != detect.Critical || !strings.Contains(f.Summary, "Crash loop: 3 restarts") {
			t.Errorf("finding = %s %s", f.Severity, f.Summary)
		}
		if e := evidenceNamed(t, f, "restarts in crash-loop window"); e.Value != 3 {
			t.Errorf("restart count evidence = %+v", e)
		}
	})
}

func TestReplicaDownDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", healthyEngine()},
		{"two failed scrapes", failingFor(2, "timeout", "context deadline exceeded")},
		{"recovered after failures", func() *scenario {
			s := healthyEngine()
			s.failures = []failure{{from: 60 * minute, to: 62 * minute, reason: "timeout"}}
			return s
		}()},
		{"restart long ago", func() *scenario {
			s := healthyEngine()
			s.restarts = []time.Duration{30 * minute}
			return s
		}()},
		// One counter going backwards (a glitch, a relabelled series) is not
		// a restart: most counters did not drop.
		{"one counter drops", healthyEngine().with(
			counter(series.NumAbortedRequestsTotal, constant(0.01)).corrupted(func(el time.Duration) (float64, bool) {
				return 1, el >= incident
			}))},
		{"healthy heavy load", healthyEngine().with(gauge(series.NumRunningReqs, constant(256)), gauge(series.NumQueueReqs, constant(5)))},
		{"missing series", newScenario()},
		{"NaN/Inf samples", healthyEngine().with(
			counter(series.NumRequestsTotal, constant(10)).corrupted(every(2, math.NaN())),
			counter(series.PromptTokensTotal, constant(10000)).corrupted(every(3, math.Inf(-1))),
			counter(series.EvictedTokensTotal, constant(500), "cache_type", "RadixCache").corrupted(every(5, 0)),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.ReplicaDown))
		})
	}
}
