package detect_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// retryAvalanche scripts clients retrying into a slow server: arrivals go
// from 10/s to 25/s while completions fall to 9/s, aborts and 503s rise and
// the queue doubles every 30 s (from a minute before the range, when
// latency started to climb).
func retryAvalanche() *scenario {
	return healthyEngine().with(
		counter(series.HTTPRequestsTotal, stepAt(incident, 10, 25), "endpoint", chat, "method", "POST"),
		counter(series.NumRequestsTotal, stepAt(incident, 10, 9)),
		counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 3)),
		counter(series.HTTPResponsesTotal, stepAt(incident, 0, 1), "endpoint", chat, "method", "POST", "status_code", "503"),
		gauge(series.NumQueueReqs, doublingFrom(incident-minute, 2, 30*time.Second)),
		hist(series.E2ERequestLatency, e2eBounds, constant(10), stepAt(incident, 5, 50)),
	)
}

func TestRetryAvalanchePages(t *testing.T) {
	t.Run("engine, loop engaged", func(t *testing.T) {
		f := one(t, run(t, retryAvalanche(), detect.RetryAvalanche))
		checkCommon(t, f, detect.RetryAvalanche)
		if f.Severity != detect.Critical || f.Layer != detect.LayerClient {
			t.Errorf("severity %s layer %s; want critical client", f.Severity, f.Layer)
		}
		// /metrics and /health_generate polling are not arrivals.
		if e := evidenceNamed(t, f, "arrivals/s"); !approx(e.Value, 25, 0.01) || !approx(e.Baseline, 10, 0.01) {
			t.Errorf("arrivals evidence = %+v; want 25 vs 10", e)
		}
		if e := evidenceNamed(t, f, "arrivals per completion"); !approx(e.Value, 25.0/9, 0.01) || !approx(e.Baseline, 1, 0.01) {
			t.Errorf("amplification evidence = %+v; want 2.78 vs 1", e)
		}
		if e := evidenceNamed(t, f, "client-visible failures/s"); !approx(e.Value, 4, 0.01) || !approx(e.Baseline, 0.01, 0.01) {
			t.Errorf("failures evidence = %+v; want 3 aborts + 1 503 per s", e)
		}
		if e := evidenceNamed(t, f, "aborted requests/s"); !approx(e.Value, 3, 0.01) {
			t.Errorf("aborts evidence = %+v", e)
		}
		// Last 30 s vs the 30 s ending a minute earlier: 2^(60/30) = 4x growth.
		if e := evidenceNamed(t, f, "queued requests"); e.Value < 3*e.Baseline || e.Value < 10 {
			t.Errorf("backlog evidence = %+v; want super-linear growth", e)
		}
		if !strings.Contains(f.Diagnosis, "feedback loop") || !strings.Contains(f.Diagnosis, "Adding replicas alone does not end it") {
			t.Errorf("diagnosis = %s", f.Diagnosis)
		}
		if !strings.Contains(f.Emergency[0], "503") || !strings.Contains(f.RootCause[0], "backoff") {
			t.Errorf("steps = %v / %v", f.Emergency, f.RootCause)
		}
	})
	t.Run("engine, no backlog growth yet", func(t *testing.T) {
		f := one(t, run(t, retryAvalanche().with(gauge(series.NumQueueReqs, constant(3))), detect.RetryAvalanche))
		if f.Severity != detect.Warning {
			t.Errorf("severity %s; want warning", f.Severity)
		}
	})
	t.Run("engine without num_queue_reqs uses active HTTP requests", func(t *testing.T) {
		s := retryAvalanche().without(series.NumQueueReqs).with(
			gauge(series.HTTPRequestsActive, doublingFrom(incident-minute, 42, 30*time.Second), "endpoint", chat, "method", "POST"))
		f := one(t, run(t, s, detect.RetryAvalanche))
		if f.Severity != detect.Critical {
			t.Errorf("severity %s; want critical", f.Severity)
		}
		evidenceNamed(t, f, "active HTTP requests")
	})
	t.Run("gateway", func(t *testing.T) {
		s := newScenario(
			counter(series.GatewayHTTPRequestsTotal, stepAt(incident, 40, 100), "method", "POST", "path", chat),
			counter(series.GatewayHTTPRequestsTotal, constant(1), "method", "GET", "path", "/health"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 40, 35), "path", chat, "status_code", "200"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 5), "path", chat, "status_code", "504"),
			counter(series.GatewayRetriesTotal, stepAt(incident, 0.05, 20), "worker_type", "regular", "endpoint", chat),
			gauge("smg_worker_requests_active", doublingFrom(incident-minute, 20, 30*time.Second), "worker", "http://w0:30000"),
		)
		s.kind, s.model = "gateway", ""
		fs := run(t, s, detect.RetryAvalanche)
		f := one(t, fs)
		if f.Severity != detect.Critical || f.Layer != detect.LayerClient || f.Replica != "sglang-0" {
			t.Errorf("finding = %s %s %s", f.Severity, f.Layer, f.Replica)
		}
		if e := evidenceNamed(t, f, "worker retries/s"); !approx(e.Value, 20, 0.01) {
			t.Errorf("retries evidence = %+v", e)
		}
		if e := evidenceNamed(t, f, "arrivals per completion"); !approx(e.Value, 2.5, 0.01) || !approx(e.Baseline, 1, 0.01) {
			t.Errorf("amplification evidence = %+v", e)
		}
	})
}

func TestRetryAvalancheDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy", healthyEngine()},
		// Organic surge: twice the traffic, served: completions keep up, few aborts.
		{"organic traffic surge", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 20)),
			counter(series.HTTPResponsesTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST", "status_code", "200"),
			counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 0.02)),
			gauge(series.NumQueueReqs, constant(3)),
		)},
		// A surge beyond capacity: completions saturate and the queue grows,
		// but clients are patient (no aborts, no errors). Overload, not a
		// retry loop.
		{"overload without retries", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 12)),
			gauge(series.NumQueueReqs, doublingFrom(incident-minute, 2, 30*time.Second)),
		)},
		// The watchdog (or someone) polling /metrics hard is not traffic.
		{"metrics polling surge", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 0.2, 50), "endpoint", "/metrics", "method", "GET"),
			counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 3)),
		)},
		// 0.5 requests/s: 60 arrivals in the range, below min_requests.
		{"low traffic", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 0.1, 0.5), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 0.1, 0.1)),
			counter(series.NumAbortedRequestsTotal, stepAt(incident, 0, 0.4)),
		)},
		{"counter reset after restart", func() *scenario {
			s := healthyEngine()
			s.restarts = []time.Duration{incident + 30*time.Second}
			return s
		}()},
		{"missing series", newScenario(gauge(series.NumQueueReqs, constant(3)))},
		{"NaN/Inf samples", healthyEngine().with(
			counter(series.HTTPRequestsTotal, constant(10), "endpoint", chat, "method", "POST").corrupted(every(4, math.Inf(1))),
			counter(series.NumRequestsTotal, constant(10)).corrupted(every(3, math.NaN())),
			counter(series.NumAbortedRequestsTotal, constant(0.01)).corrupted(every(2, math.Inf(-1))),
			gauge(series.NumQueueReqs, constant(2)).corrupted(always(math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.RetryAvalanche))
		})
	}
}

// The low-traffic case is rejected by the traffic floor, not by luck: with
// the floor lowered it pages.
func TestRetryAvalancheLowTrafficFloorIsWhatHolds(t *testing.T) {
	s := healthyEngine().with(
		counter(series.HTTPRequestsTotal, stepAt(incident, 0.1, 0.5), "endpoint", chat, "method", "POST"),
		counter(series.NumRequestsTotal, stepAt(incident, 0.1, 0.1)),
		counter(series.NumAbortedRequestsTotal, stepAt(incident, 0, 0.4)),
	)
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(s *detect.RetryAvalancheConfig) { s.MinRequests = 10 })
	one(t, detectWith(t, s, cfg, detect.RetryAvalanche))
}
