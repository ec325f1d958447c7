package detect_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// retryAvalanche scripts clients retrying into a slow server: 10 new
// requests/s, but clients time out (14 aborts/s) and send each failed
// request again, so arrivals go from 10/s to 25/s while completions fall to
// 9/s; the queue doubles every 30 s (from a minute before the range, when
// latency started to climb).
func retryAvalanche() *scenario {
	return healthyEngine().with(
		counter(series.HTTPRequestsTotal, stepAt(incident, 10, 25), "endpoint", chat, "method", "POST"),
		counter(series.NumRequestsTotal, stepAt(incident, 10, 9)),
		counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 14)),
		counter(series.HTTPResponsesTotal, stepAt(incident, 0, 1), "endpoint", chat, "method", "POST", "status_code", "503"),
		gauge(series.NumQueueReqs, doublingFrom(incident-minute, 2, 30*time.Second)),
		hist(series.E2ERequestLatency, e2eBounds, constant(10), stepAt(incident, 5, 50)),
	)
}

// gatewayRetryStorm is the model gateway retrying 503s from its workers:
// client traffic is flat at 40 requests/s, but each becomes five upstream
// attempts (the default --retry-max-retries is 5), and 5/s fail after the
// last one.
func gatewayRetryStorm() *scenario {
	s := newScenario(
		counter(series.GatewayHTTPRequestsTotal, constant(40), "method", "POST", "path", chat),
		counter(series.GatewayHTTPRequestsTotal, constant(1), "method", "GET", "path", "/health"),
		counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 40, 35), "path", chat, "status_code", "200"),
		counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 5), "path", chat, "status_code", "503", "error_code", "service_unavailable"),
		counter(series.GatewayUpstreamResponses, stepAt(incident, 40, 35), "router_type", "http", "status_code", "200"),
		counter(series.GatewayUpstreamResponses, stepAt(incident, 0.05, 165), "router_type", "http", "status_code", "503", "error_code", "service_unavailable"),
		counter(series.GatewayRetriesTotal, stepAt(incident, 0.05, 160), "worker_type", "regular", "endpoint", "chat"),
		counter(series.GatewayRetriesExhaustedTotal, stepAt(incident, 0, 5), "worker_type", "regular", "endpoint", "chat"),
		gauge(series.GatewayCircuitBreakerState, stepAt(incident, 0, 1), "worker", "http://10.0.0.1:30000"),
		gauge(series.GatewayCircuitBreakerState, constant(0), "worker", "http://10.0.0.2:30000"),
		gauge("smg_worker_requests_active", constant(20), "worker", "http://10.0.0.2:30000"),
	)
	s.kind, s.model = "gateway", ""
	return s
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
		// The retry evidence: 10/s of fresh traffic, the other 15/s are
		// the failed requests sent again.
		if e := evidenceNamed(t, f, "offered load/s"); !approx(e.Value, 10, 0.02) {
			t.Errorf("offered load evidence = %+v; want 10", e)
		}
		if e := evidenceNamed(t, f, "retried arrivals/s"); !approx(e.Value, 15, 0.02) {
			t.Errorf("retried evidence = %+v; want 15", e)
		}
		if e := evidenceNamed(t, f, "arrivals per completion"); !approx(e.Value, 25.0/9, 0.01) || !approx(e.Baseline, 1, 0.01) {
			t.Errorf("amplification evidence = %+v; want 2.78 vs 1", e)
		}
		if e := evidenceNamed(t, f, "client-visible failures/s"); !approx(e.Value, 15, 0.01) || !approx(e.Baseline, 0.01, 0.01) {
			t.Errorf("failures evidence = %+v; want 14 aborts + 1 503 per s", e)
		}
		if e := evidenceNamed(t, f, "aborted requests/s"); !approx(e.Value, 14, 0.01) {
			t.Errorf("aborts evidence = %+v", e)
		}
		// Last 30 s vs the 30 s ending a minute earlier: 2^(60/30) = 4x growth.
		if e := evidenceNamed(t, f, "queued requests"); e.Value < 3*e.Baseline || e.Value < 10 {
			t.Errorf("backlog evidence = %+v; want super-linear growth", e)
		}
		contains(t, "summary", f.Summary, "15 of 25 requests/s are clients retrying failed requests (fresh traffic about 10/s)", "only 9/s complete")
		if !strings.Contains(f.Diagnosis, "feedback loop") || !strings.Contains(f.Diagnosis, "Adding replicas alone does not end it") {
			t.Errorf("diagnosis = %s", f.Diagnosis)
		}
		if !strings.Contains(f.Emergency[0], "503") || !strings.Contains(f.RootCause[0], "backoff") {
			t.Errorf("steps = %v / %v", f.Emergency, f.RootCause)
		}
	})
	t.Run("engine, no backlog growth and moderate amplification", func(t *testing.T) {
		s := healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 20), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 11)),
			counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 9.5)),
			gauge(series.NumQueueReqs, constant(3)),
		)
		f := one(t, run(t, s, detect.RetryAvalanche))
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
	t.Run("gateway: the page leads with the router's retries and the amplification", func(t *testing.T) {
		f := one(t, run(t, gatewayRetryStorm(), detect.RetryAvalanche))
		if f.Severity != detect.Critical || f.Layer != detect.LayerClient || f.Replica != "sglang-0" {
			t.Errorf("finding = %s %s %s", f.Severity, f.Layer, f.Replica)
		}
		if !strings.HasPrefix(f.Summary, "Router retries 160/s: 5 upstream attempts per client request (baseline 1") {
			t.Errorf("summary = %q; want it to lead with the retries and the amplification", f.Summary)
		}
		contains(t, "summary", f.Summary, "5 client requests/s fail after exhausting retries")
		if e := f.Evidence[0]; e.Name != "router retries/s" || !approx(e.Value, 160, 0.01) {
			t.Errorf("first evidence = %+v; want the router's retries", e)
		}
		if e := evidenceNamed(t, f, "upstream attempts per client request"); !approx(e.Value, 5, 0.01) || !approx(e.Baseline, 1, 0.01) {
			t.Errorf("amplification evidence = %+v; want 5 vs 1", e)
		}
		evidenceNamed(t, f, "circuit breaker open")
		contains(t, "diagnosis", f.Diagnosis, "the router is retrying", "40 client requests/s become 5 upstream attempts per request")
		contains(t, "first step", f.Emergency[0], "--retry-max-retries")
	})
	t.Run("gateway without upstream responses: requests plus retries", func(t *testing.T) {
		f := one(t, run(t, gatewayRetryStorm().without(series.GatewayUpstreamResponses), detect.RetryAvalanche))
		if e := evidenceNamed(t, f, "upstream attempts per client request (requests + retries)"); !approx(e.Value, 5, 0.01) {
			t.Errorf("amplification evidence = %+v; want (40+160)/40", e)
		}
	})
	// The legacy router (sgl_router_*): client arrivals without a path
	// (sgl_router_http_requests_total), route-labelled retries and attempts,
	// as the scraper normalizes them.
	t.Run("legacy gateway", func(t *testing.T) {
		s := newScenario(
			counter(series.GatewayHTTPRequestsTotal, constant(41)),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 41, 36), "status_code", "200"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 5), "status_code", "503", "error_code", "service_unavailable"),
			counter(series.GatewayUpstreamResponses, stepAt(incident, 40, 35), "endpoint", chat, "status_code", "200"),
			counter(series.GatewayUpstreamResponses, stepAt(incident, 0.05, 165), "endpoint", chat, "status_code", "503", "error_code", "service_unavailable"),
			counter(series.GatewayRetriesTotal, stepAt(incident, 0.05, 160), "endpoint", chat),
			counter(series.GatewayRetriesExhaustedTotal, stepAt(incident, 0, 5), "endpoint", chat),
		)
		s.kind, s.model = "gateway", ""
		f := one(t, run(t, s, detect.RetryAvalanche))
		if f.Severity != detect.Critical || !strings.HasPrefix(f.Summary, "Router retries 160/s") {
			t.Errorf("finding = %s %q", f.Severity, f.Summary)
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
		// Traffic triples on a replica started with --max-queued-requests,
		// and nobody retries: it sheds with 503 (only the non-streamed
		// share shows as 503) and the queue sits at its cap. Arrivals
		// outgrow completions, failures rise — overload, error_rate's page.
		{"three times the traffic, shed with 503, no retries", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 30), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 12)),
			counter(series.HTTPResponsesTotal, stepAt(incident, 10, 25.5), "endpoint", chat, "method", "POST", "status_code", "200"),
			counter(series.HTTPResponsesTotal, stepAt(incident, 0, 4.5), "endpoint", chat, "method", "POST", "status_code", "503"),
			gauge(series.NumQueueReqs, stepAt(incident, 2, 64)),
		)},
		// A surge whose clients give up after 40 s and do not retry: the
		// aborts come after the arrivals grew, not before.
		{"surge with client timeouts, no retries", healthyEngine().with(
			counter(series.HTTPRequestsTotal, stepAt(incident, 10, 22), "endpoint", chat, "method", "POST"),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 5)),
			counter(series.NumAbortedRequestsTotal, stepAt(incident+40*time.Second, 0.01, 17)),
			gauge(series.NumQueueReqs, doublingFrom(incident, 2, 30*time.Second)),
		)},
		// A gateway retrying now and then, as any does.
		{"gateway, occasional retries", func() *scenario {
			s := gatewayRetryStorm().with(
				counter(series.GatewayUpstreamResponses, constant(0.05), "router_type", "http", "status_code", "503", "error_code", "service_unavailable"),
				counter(series.GatewayRetriesTotal, constant(0.05), "worker_type", "regular", "endpoint", "chat"),
			)
			return s
		}()},
		// Retries above the floor but a small share of the traffic: one
		// attempt per request and a bit.
		{"gateway, retries without amplification", gatewayRetryStorm().with(
			counter(series.GatewayUpstreamResponses, stepAt(incident, 0.05, 2), "router_type", "http", "status_code", "503", "error_code", "service_unavailable"),
			counter(series.GatewayRetriesTotal, stepAt(incident, 0.05, 2), "worker_type", "regular", "endpoint", "chat"),
		)},
		{"gateway, counter reset after restart", func() *scenario {
			s := gatewayRetryStorm().with(
				counter(series.GatewayUpstreamResponses, constant(0.05), "router_type", "http", "status_code", "503", "error_code", "service_unavailable"),
				counter(series.GatewayRetriesTotal, constant(0.05), "worker_type", "regular", "endpoint", "chat"),
			)
			s.restarts = []time.Duration{incident + 30*time.Second}
			return s
		}()},
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

// The legacy router's own exposition (the scraper's fixture, its counters
// driven over time) through the real scraper and window: sgl_router_* names,
// route labels, arrivals without a path. Healthy for an hour, then a retry
// storm — each client request becomes five attempts. The gateway paths must
// see it: retry_avalanche leads with the router's retries, error_rate counts
// the 503s users get.
func TestLegacyGatewayRetryStormThroughTheScraper(t *testing.T) {
	capture, err := fixture.SGLang("sgl-router-legacy-2025-12.prom")
	if err != nil {
		t.Fatal(err)
	}
	const storm = 62 * time.Minute
	// Per-second rates of each sample line, before and during the storm.
	rates := map[string][2]float64{
		`sgl_router_http_requests_total`:                                                                                           {41, 41}, // 40 chat + 1 health
		`sgl_router_http_responses_total{status_code="200",error_code=""}`:                                                         {41, 36},
		`sgl_router_http_responses_total{status_code="503",error_code="service_unavailable"}`:                                      {0, 5},
		`sgl_router_requests_total{route="/v1/chat/completions"}`:                                                                  {40, 35},
		`sgl_router_attempt_http_responses_total{route="/v1/chat/completions",status_code="200",error_code=""}`:                    {40, 35},
		`sgl_router_attempt_http_responses_total{route="/v1/chat/completions",status_code="503",error_code="service_unavailable"}`: {0.05, 165},
		`sgl_router_retries_total{route="/v1/chat/completions"}`:                                                                   {0.05, 160},
		`sgl_router_retries_exhausted_total{route="/v1/chat/completions"}`:                                                         {0, 5},
	}
	counters := map[string]float64{}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(string(capture), "\n") {
			if key, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
				if _, counter := rates[key]; counter {
					line = key + " " + strconv.FormatFloat(counters[key], 'f', -1, 64)
				}
			}
			fmt.Fprintln(w, line)
		}
	}))
	defer srv.Close()

	cfg := detect.DefaultConfig()
	const interval = 10 * time.Second
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	target := scrape.Target{Name: "router", URL: srv.URL + "/metrics", Kind: scrape.KindGateway}
	var now time.Time
	for el := time.Duration(0); el <= storm+3*time.Minute; el += interval {
		now = start.Add(el)
		mu.Lock()
		for key, r := range rates {
			rate := r[0]
			if el > storm {
				rate = r[1]
			}
			counters[key] += rate * interval.Seconds()
		}
		mu.Unlock()
		sc := scrape.ScrapeOnce(context.Background(), nil, target, scrape.Options{})
		sc.At = now
		if err := store.Append(sc); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fs []detect.Finding
	store.View("router", func(w detect.Window) {
		for _, d := range ds {
			fs = append(fs, d.Detect(w, now)...)
		}
	})
	ra, ok := findingOf(fs, detect.RetryAvalanche)
	if !ok {
		t.Fatalf("no retry_avalanche on the legacy gateway: %+v", fs)
	}
	// The legacy arrival counter has no route: health checks count as
	// client requests, 200 attempts over 41 requests.
	if ra.Severity != detect.Critical || !strings.HasPrefix(ra.Summary, "Router retries 160/s: 4.88 upstream attempts per client request") {
		t.Errorf("retry_avalanche = %s %q", ra.Severity, ra.Summary)
	}
	// Per worker: the breaker of 46571 is open, 46572 only carries load.
	want := &detect.Upstream{Workers: 2, Failing: []detect.UpstreamWorker{{Worker: "127.0.0.1:46571", Breaker: "open"}}}
	if !reflect.DeepEqual(ra.Upstream, want) {
		t.Errorf("the gateway's workers = %+v, want %+v", ra.Upstream, want)
	}
	er, ok := findingOf(fs, detect.ErrorRate)
	if !ok {
		t.Fatalf("no error_rate while 5 of 41 requests/s fail: %+v", fs)
	}
	if !reflect.DeepEqual(er.Upstream, want) || !strings.Contains(er.Diagnosis, "The failures come from 1 of the 2 workers behind the gateway: 127.0.0.1:46571 (breaker open)") {
		t.Errorf("error_rate's workers = %+v, diagnosis %q", er.Upstream, er.Diagnosis)
	}
	if e := evidenceNamed(t, er, "shed requests/s"); !approx(e.Value, 5, 0.02) {
		t.Errorf("sheds evidence = %+v", e)
	}
	if !detect.Explains(ra, er) {
		t.Error("the router's retries do not explain the failing requests")
	}
	if _, blind := findingOf(fs, detect.MetricsBlind); blind {
		t.Error("the legacy gateway is reported blind")
	}
}

// RetryAvalanche's golden page (checkPage).
func TestGoldenPageEventsRetryAvalanche(t *testing.T) {
	checkPage(t, pageCase{class: detect.RetryAvalanche, scenario: retryAvalanche()})
}
