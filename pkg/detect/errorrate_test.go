package detect_test

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// failing is healthyEngine answering 10 requests/s on the chat endpoint,
// of which failed/s fail with status from the incident on.
func failing(status string, failed float64) *scenario {
	return healthyEngine().with(
		counter(series.HTTPResponsesTotal, stepAt(incident, 10, 10-failed), "endpoint", chat, "method", "POST", "status_code", "200"),
		counter(series.HTTPResponsesTotal, stepAt(incident, 0, failed), "endpoint", chat, "method", "POST", "status_code", status),
	)
}

func TestErrorRatePages(t *testing.T) {
	t.Run("503 sheds are critical, in the queue layer", func(t *testing.T) {
		f := one(t, run(t, failing("503", 1.5), detect.ErrorRate))
		checkCommon(t, f, detect.ErrorRate)
		if f.Severity != detect.Critical || f.Layer != detect.LayerQueue {
			t.Errorf("severity %s layer %s; want critical queue", f.Severity, f.Layer)
		}
		// 1.5 of 10 answered requests/s, plus the healthy trickle of aborts.
		if e := evidenceNamed(t, f, "failed share of requests"); !approx(e.Value, 0.151, 0.01) || e.Unit != "ratio" {
			t.Errorf("share evidence = %+v; want 15%%", e)
		}
		if e := evidenceNamed(t, f, "shed requests/s (429/503)"); !approx(e.Value, 1.5, 0.01) {
			t.Errorf("sheds evidence = %+v", e)
		}
		if e := evidenceNamed(t, f, "server errors/s"); e.Value != 0 {
			t.Errorf("a 503 is a shed, not a server error: %+v", e)
		}
		contains(t, "summary", f.Summary, "15.1% of requests failing over 2m", "shed with 429/503")
	})
	t.Run("2% server errors are a warning, in the process layer", func(t *testing.T) {
		f := one(t, run(t, failing("500", 0.2), detect.ErrorRate))
		if f.Severity != detect.Warning || f.Layer != detect.LayerProcess {
			t.Errorf("severity %s layer %s; want warning process", f.Severity, f.Layer)
		}
		if e := evidenceNamed(t, f, "server errors/s"); !approx(e.Value, 0.2, 0.01) {
			t.Errorf("server errors evidence = %+v", e)
		}
		contains(t, "diagnosis", f.Diagnosis, "Server errors")
	})
	t.Run("aborted requests count, in the client layer", func(t *testing.T) {
		s := healthyEngine().with(counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 1)))
		f := one(t, run(t, s, detect.ErrorRate))
		if f.Severity != detect.Critical || f.Layer != detect.LayerClient {
			t.Errorf("severity %s layer %s; want critical client", f.Severity, f.Layer)
		}
		if e := evidenceNamed(t, f, "aborted requests/s"); !approx(e.Value, 1, 0.01) {
			t.Errorf("aborts evidence = %+v", e)
		}
	})
	t.Run("an aborted stream answered 200 is no success", func(t *testing.T) {
		// Nothing completes; every request is aborted, the streamed ones
		// (6 of 10/s) after their 200 went out, the others with a 400.
		s := healthyEngine().with(
			counter(series.NumRequestsTotal, stepAt(incident, 10, 0)),
			counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 10)),
			counter(series.HTTPResponsesTotal, stepAt(incident, 10, 6), "endpoint", chat, "method", "POST", "status_code", "200"),
			counter(series.HTTPResponsesTotal, stepAt(incident, 0, 4), "endpoint", chat, "method", "POST", "status_code", "400"),
		)
		f := one(t, run(t, s, detect.ErrorRate))
		if e := evidenceNamed(t, f, "failed share of requests"); !approx(e.Value, 1, 0.01) {
			t.Errorf("share evidence = %+v; want 100%% (no request completed)", e)
		}
		if e := evidenceNamed(t, f, "answered requests/s"); !approx(e.Value, 10, 0.01) {
			t.Errorf("answered evidence = %+v; want 10/s, each aborted request once", e)
		}
	})
	t.Run("a release without per-status responses: completions and aborts", func(t *testing.T) {
		s := healthyEngine().without(series.HTTPResponsesTotal).with(counter(series.NumAbortedRequestsTotal, stepAt(incident, 0.01, 1)))
		f := one(t, run(t, s, detect.ErrorRate))
		// 1 aborted of 10 completed + 1 aborted.
		if e := evidenceNamed(t, f, "failed share of requests"); !approx(e.Value, 1.0/11, 0.02) {
			t.Errorf("share evidence = %+v", e)
		}
	})
	t.Run("gateway", func(t *testing.T) {
		s := newScenario(
			counter(series.GatewayHTTPRequestsTotal, constant(40), "method", "POST", "path", chat),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 40, 36), "path", chat, "status_code", "200"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 4), "path", chat, "status_code", "502"),
			// Health checks fail too, but they are not users' requests.
			counter(series.GatewayHTTPResponsesTotal, constant(1), "path", "/health", "status_code", "503"),
		)
		s.kind, s.model = "gateway", ""
		f := one(t, run(t, s, detect.ErrorRate))
		if f.Severity != detect.Critical || f.Layer != detect.LayerProcess {
			t.Errorf("severity %s layer %s; want critical process", f.Severity, f.Layer)
		}
		if e := evidenceNamed(t, f, "failed share of requests"); !approx(e.Value, 0.1, 0.01) {
			t.Errorf("share evidence = %+v; want 10%% (health checks excluded)", e)
		}
	})
	t.Run("legacy gateway: responses without a path", func(t *testing.T) {
		s := newScenario(
			counter(series.GatewayHTTPRequestsTotal, constant(40)),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 40, 30), "status_code", "200"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 10), "status_code", "503", "error_code", "service_unavailable"),
		)
		s.kind, s.model = "gateway", ""
		f := one(t, run(t, s, detect.ErrorRate))
		if e := evidenceNamed(t, f, "shed requests/s"); !approx(e.Value, 10, 0.01) {
			t.Errorf("sheds evidence = %+v", e)
		}
		// A gateway counts its own retries: its overload says so, not
		// the engine's fresh-traffic reading.
		contains(t, "diagnosis", f.Diagnosis, "Overload", "No retries are visible (the gateway retries 0/s)")
	})
	t.Run("gateway retrying: the headline says so", func(t *testing.T) {
		s := newScenario(
			counter(series.GatewayHTTPRequestsTotal, constant(40), "method", "POST", "path", chat),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 40, 30), "path", chat, "status_code", "200"),
			counter(series.GatewayHTTPResponsesTotal, stepAt(incident, 0, 10), "path", chat, "status_code", "502"),
			counter(series.GatewayRetriesTotal, stepAt(incident, 0, 15)),
		)
		s.kind, s.model = "gateway", ""
		f := one(t, run(t, s, detect.ErrorRate))
		contains(t, "summary", f.Summary, " — the gateway retries 15/s of 40 client requests/s")
		contains(t, "diagnosis", f.Diagnosis, "the gateway is retrying", "the retry avalanche runbook says how to break it")
	})
}

func TestErrorRateDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"healthy heavy load", healthyEngine()},
		// 3 requests in the window, one of them failed: 33%, and no outage.
		{"low traffic", healthyEngine().with(
			counter(series.HTTPRequestsTotal, constant(3.0/120), "endpoint", chat, "method", "POST"),
			counter(series.HTTPResponsesTotal, constant(2.0/120), "endpoint", chat, "method", "POST", "status_code", "200"),
			counter(series.HTTPResponsesTotal, constant(1.0/120), "endpoint", chat, "method", "POST", "status_code", "503"),
			counter(series.NumRequestsTotal, constant(2.0/120)),
			counter(series.NumAbortedRequestsTotal, constant(0)),
		)},
		// Every counter drops to zero mid-range: that is no burst of errors.
		{"counter reset after restart", func() *scenario {
			s := failing("500", 0.01)
			s.restarts = []time.Duration{incident + 30*time.Second}
			return s
		}()},
		// The watchdog's own polling failing is not users failing.
		{"failing /metrics and health probes", healthyEngine().with(
			counter(series.HTTPResponsesTotal, constant(0.2), "endpoint", "/metrics", "method", "GET", "status_code", "500"),
			counter(series.HTTPResponsesTotal, constant(0.1), "endpoint", "/health_generate", "method", "GET", "status_code", "503"),
		)},
		{"missing series", newScenario(gauge(series.NumQueueReqs, constant(3)))},
		// A rollout's new replica: counters from zero, serving its first
		// minutes without failures.
		{"new replica after a rollout", func() *scenario {
			s := healthyEngine()
			for i := range s.metrics {
				s.metrics[i].init = 0
			}
			s.length = 3 * minute
			return s
		}()},
		// The metrics endpoint answers an HTML login page for two minutes
		// while the server serves fine: no data, no verdict.
		{"broken metrics endpoint on a healthy server", func() *scenario {
			s := healthyEngine()
			s.failures = []failure{{from: s.length - 2*minute, to: s.length, reason: series.FailureNotMetrics, status: 200, error: "an HTML page"}}
			return s
		}()},
		{"NaN/Inf samples", healthyEngine().with(
			counter(series.HTTPResponsesTotal, constant(10), "endpoint", chat, "method", "POST", "status_code", "200").corrupted(every(3, math.NaN())),
			counter(series.HTTPResponsesTotal, constant(0.001), "endpoint", chat, "method", "POST", "status_code", "503").corrupted(every(4, math.Inf(1))),
			counter(series.NumAbortedRequestsTotal, constant(0.01)).corrupted(every(2, math.Inf(-1))),
		)},
		{"all NaN", healthyEngine().with(
			counter(series.HTTPResponsesTotal, constant(10), "endpoint", chat, "method", "POST", "status_code", "200").corrupted(always(math.NaN())),
			counter(series.HTTPResponsesTotal, constant(1), "endpoint", chat, "method", "POST", "status_code", "503").corrupted(always(math.NaN())),
			counter(series.NumAbortedRequestsTotal, constant(1)).corrupted(always(math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.ErrorRate))
		})
	}
}

// The low-traffic case is held by the request floor, not by luck: with the
// floors lowered, one failure in three pages.
func TestErrorRateLowTrafficFloorIsWhatHolds(t *testing.T) {
	s := healthyEngine().with(
		counter(series.HTTPResponsesTotal, constant(2.0/120), "endpoint", chat, "method", "POST", "status_code", "200"),
		counter(series.HTTPResponsesTotal, constant(1.0/120), "endpoint", chat, "method", "POST", "status_code", "503"),
		counter(series.NumAbortedRequestsTotal, constant(0)),
	)
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(c *detect.ErrorRateConfig) { c.MinRequests, c.MinFailedRequests = 0.5, 0.5 })
	one(t, detectWith(t, s, cfg, detect.ErrorRate))
}

// Failed requests are where every cause ends: each cause class explains
// them, and they explain nothing.
func TestErrorRateIsAConsequenceOfEveryCause(t *testing.T) {
	errRate := fnd(detect.ErrorRate, detect.LayerQueue)
	for _, cause := range []detect.Finding{collapsePrompt, collapseEviction, kvSat, storm, queueLat, prefillLat, decodeSlow,
		avalanche, hang, lora, pdFail, cold, restart, down404} {
		if !detect.Explains(cause, errRate) {
			t.Errorf("%s/%s does not explain error_rate", cause.Class, cause.Layer)
		}
		if detect.Explains(errRate, cause) {
			t.Errorf("error_rate explains %s/%s", cause.Class, cause.Layer)
		}
	}
	if detect.Explains(blind, errRate) || detect.Explains(errRate, errRate) {
		t.Error("a blind target or error_rate itself explains error_rate")
	}
}

// simulate runs one replica of the queueing model through the real scraper
// into the real window, and returns the findings of every default detector
// at each evaluation time (every 30 s from evalFrom on).
func simulate(t *testing.T, sc sim.Scenario, srv sim.ServerConfig, evalFrom, until time.Duration) map[time.Duration][]detect.Finding {
	t.Helper()
	start := time.Date(2026, 5, 29, 13, 0, 0, 0, time.UTC)
	fleet := sim.NewFleet(sim.FleetConfig{Replicas: 1, Seed: 3, Start: start, Scenario: sc, Server: srv, Warmup: 5 * time.Minute})
	cfg := detect.DefaultConfig()
	const interval = 10 * time.Second
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srvHTTP := httptest.NewServer(fleet.Handler(0))
	defer srvHTTP.Close()
	tg := scrape.Target{Name: "sim-0", URL: srvHTTP.URL + "/metrics", Kind: scrape.KindEngine}
	out := map[time.Duration][]detect.Finding{}
	for el := time.Duration(0); el <= until; el += interval {
		now := start.Add(el)
		fleet.Advance(now)
		s := scrape.ScrapeOnce(context.Background(), nil, tg, scrape.Options{})
		s.At = now // synthetic time: the sim and the window share it
		if err := store.Append(s); err != nil {
			t.Fatal(err)
		}
		if el < evalFrom || el%(30*time.Second) != 0 {
			continue
		}
		store.View(tg.Name, func(w detect.Window) {
			out[el] = []detect.Finding{}
			for _, d := range ds {
				out[el] = append(out[el], d.Detect(w, now)...)
			}
		})
	}
	return out
}

func findingOf(fs []detect.Finding, c detect.Class) (detect.Finding, bool) {
	for _, f := range fs {
		if f.Class == c {
			return f, true
		}
	}
	return detect.Finding{}, false
}

// Traffic triples on a replica started with --max-queued-requests; the
// clients do not retry. It sheds with 503 and users fail: that is
// overload, paged as error_rate with the capacity steps, never as a retry
// avalanche.
func TestSimulatedOverloadWithSheddingIsNotARetryAvalanche(t *testing.T) {
	srv := sim.DefaultServerConfig()
	srv.MaxQueuedRequests = 64
	base := sim.DefaultLoad()
	base.Rate = 7.5
	base.ClientTimeout = 0 // patient clients: nobody gives up, nobody retries
	sc := sim.Scenario{Name: "overload", Base: base, Phases: []sim.Phase{
		{Name: "healthy", Duration: 65 * time.Minute},
		{Name: "three times the traffic", Change: func(l *sim.Load) { l.Rate *= 3 }},
	}}
	rounds := simulate(t, sc, srv, 60*time.Minute, 72*time.Minute)
	for el, fs := range rounds {
		if f, ok := findingOf(fs, detect.RetryAvalanche); ok {
			t.Errorf("at %s: retry_avalanche without retries: %s", el, f.Summary)
		}
		if f, ok := findingOf(fs, detect.ErrorRate); ok && el < 65*time.Minute {
			t.Errorf("at %s, before the surge: %s", el, f.Summary)
		}
	}
	f, ok := findingOf(rounds[70*time.Minute], detect.ErrorRate)
	if !ok {
		t.Fatalf("no error_rate five minutes into the overload: %+v", rounds[70*time.Minute])
	}
	if f.Severity != detect.Critical || f.Layer != detect.LayerQueue {
		t.Errorf("severity %s layer %s; want critical queue", f.Severity, f.Layer)
	}
	contains(t, "diagnosis", f.Diagnosis, "Overload: users are failing because capacity is short", "No client retries are visible: the fresh traffic is about ",
		"they are at "+detect.FormatNumber(evidenceNamed(t, f, "arrivals/s").Value)+"/s")
	// The arrivals tripled: the page must not say they did not grow.
	if strings.Contains(f.Diagnosis, "did not grow") {
		t.Errorf("diagnosis says the tripled arrivals did not grow: %s", f.Diagnosis)
	}
	contains(t, "summary", f.Summary, "overload")
	// The queue the diagnosis cites is evidence too, over its span: the
	// headline then gives no second queue number over the triage's span.
	q := evidenceNamed(t, f, "queued requests (avg over 2m)")
	contains(t, "diagnosis", f.Diagnosis, "The waiting queue averaged "+detect.FormatNumber(q.Value)+" requests over the last 2m.")
	if len(f.Emergency) != 3 || !strings.HasPrefix(f.Emergency[0], "Scale out") ||
		!strings.HasPrefix(f.Emergency[1], "Shed at the gateway") || !strings.HasPrefix(f.Emergency[2], "Lower max_tokens") {
		t.Errorf("emergency steps = %q; want scale out, shed at the gateway, lower max_tokens, in that order", f.Emergency)
	}
}

// Clients that time out after 8 s and retry at once: a real retry storm.
// It is paged as retry_avalanche; the failing users are its consequence.
func TestSimulatedRetryStormIsARetryAvalanche(t *testing.T) {
	sc, err := sim.IncidentScenario(sim.ClassRetryAvalanche)
	if err != nil {
		t.Fatal(err)
	}
	sc.Phases[0].Duration = 65 * time.Minute // an hour of baseline first
	rounds := simulate(t, sc, sim.DefaultServerConfig(), 60*time.Minute, 70*time.Minute)
	for el, fs := range rounds {
		if el < 65*time.Minute && len(fs) > 0 {
			t.Errorf("at %s, before the storm: %s %s", el, fs[0].Class, fs[0].Summary)
		}
	}
	fs := rounds[70*time.Minute]
	ra, ok := findingOf(fs, detect.RetryAvalanche)
	if !ok {
		t.Fatalf("no retry_avalanche five minutes into the storm: %+v", fs)
	}
	if ra.Severity != detect.Critical {
		t.Errorf("severity %s; want critical", ra.Severity)
	}
	if e := evidenceNamed(t, ra, "retried arrivals/s"); e.Value < 2*evidenceNamed(t, ra, "offered load/s").Value {
		t.Errorf("retried %v vs offered %v: the storm is mostly retries", e.Value, evidenceNamed(t, ra, "offered load/s").Value)
	}
	er, ok := findingOf(fs, detect.ErrorRate)
	if !ok {
		t.Fatalf("no error_rate while most requests fail: %+v", fs)
	}
	if !detect.Explains(ra, er) {
		t.Error("the avalanche does not explain the failing requests")
	}
	contains(t, "error_rate diagnosis", er.Diagnosis, "clients are retrying", "the retry avalanche runbook says how to break it")
	contains(t, "error_rate summary", er.Summary, " — clients retrying: "+detect.FormatNumber(evidenceNamed(t, er, "arrivals/s").Value)+" requests/s arrive")
	if strings.Contains(er.Diagnosis, "Overload") {
		t.Errorf("a retry storm diagnosed as overload: %s", er.Diagnosis)
	}
	// One incident, one figure for the fresh traffic: error_rate tells
	// retries from overload by retry_avalanche's estimate, so wherever
	// both speak they give the same number.
	for el, fs := range rounds {
		ra, okRA := findingOf(fs, detect.RetryAvalanche)
		er, okER := findingOf(fs, detect.ErrorRate)
		if !okRA || !okER {
			continue
		}
		want := evidenceNamed(t, ra, "offered load/s").Value
		if got := evidenceNamed(t, er, "offered load/s").Value; got != want {
			t.Errorf("at %s: error_rate's offered load %v, retry_avalanche's %v", el, got, want)
		}
		contains(t, "error_rate diagnosis at "+el.String(), er.Diagnosis, "for about "+detect.FormatNumber(want)+"/s of fresh traffic")
	}
}

// ErrorRate's golden page (checkPage).
func TestGoldenPageEventsErrorRate(t *testing.T) {
	checkPage(t, pageCase{class: detect.ErrorRate, scenario: failing("503", 1.5)})
}

// A storm on a replica too young for an arrivals baseline: clients that
// waited out their timeout abort requests that queued before the range,
// so arrivals minus failures is about zero though no client retries.
// Without a baseline to floor the fresh traffic that is no evidence of
// retries, nor is its absence evidence of overload: `watchdog diagnose`
// read the demo's storm as "clients retrying: 6 requests/s arrive for
// about 0/s of fresh traffic", and would read its retry avalanche as
// overload and advise scaling out.
func TestErrorRateWithoutAnArrivalsBaselineDecidesNeitherWay(t *testing.T) {
	young := healthyEngine().with(
		counter(series.HTTPRequestsTotal, constant(6), "endpoint", chat, "method", "POST"),
		counter(series.HTTPResponsesTotal, constant(4), "endpoint", chat, "method", "POST", "status_code", "200"),
		counter(series.NumRequestsTotal, constant(0.1)),
		counter(series.NumAbortedRequestsTotal, constant(5.7)),
	)
	young.length = 90 * time.Second
	f := one(t, run(t, young, detect.ErrorRate))
	if strings.Contains(f.Summary, "clients retrying") || strings.Contains(f.Diagnosis, "clients are retrying") {
		t.Errorf("no arrivals baseline, yet the page calls the aborts retries: %s\n%s", f.Summary, f.Diagnosis)
	}
	// More arrive than complete: the page says so, not which it is, and
	// leads with the step that helps overload and a retry loop alike.
	contains(t, "summary", f.Summary, "6 requests/s arrive, 0.1/s complete (retries not known)")
	contains(t, "diagnosis", f.Diagnosis, "more traffic than the replica can serve or clients retrying is not known", "the retry avalanche runbook")
	if strings.Contains(f.Diagnosis, "capacity is short") || !strings.HasPrefix(f.Emergency[0], "Shed at the gateway") {
		t.Errorf("no baseline, yet the page decides overload (diagnosis %q, first step %q)", f.Diagnosis, f.Emergency[0])
	}
}
