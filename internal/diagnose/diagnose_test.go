package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// healthyPair is two scrapes 10 s apart of a busy, healthy engine: a
// full-ish batch, a short queue, 70% of prompt tokens from the cache.
func healthyPair() (a, b engineState) {
	a = engineState{running: 60, queued: 3, kvUsage: 0.6, retracted: 5, aborted: 2,
		decode: 1e6, prefillCompute: 3e5, prefillCache: 7e5, finished: 1000,
		ttft: repeat(0.3, 100), queueTime: repeat(0.02, 100), itl: repeat(0.03, 1000), e2e: repeat(6, 100)}
	b = a
	b.decode += 20000
	b.prefillCompute += 3000
	b.prefillCache += 7000
	b.finished += 100
	b.ttft = append(repeat(0.3, 100), repeat(0.35, 100)...)
	b.queueTime = repeat(0.02, 200)
	b.itl = append(repeat(0.03, 1000), repeat(0.035, 2000)...)
	b.e2e = repeat(6, 200)
	return a, b
}

func TestDiagnoseHealthyHeavyLoad(t *testing.T) {
	a, b := healthyPair()
	rep := diagnoseOne(t, 10*time.Second, observe(t, "e", 10*time.Second, expo(a), expo(b)))
	if rep.Incident || rep.Err() != nil || len(rep.UnderPressure) > 0 {
		t.Fatalf("healthy engine reported an incident or pressure: %s", rep.Summary)
	}
	tr := rep.Targets[0]
	if len(tr.Findings) != 0 || tr.Layer.Verdict != detect.TriageNoPressure || !tr.Up {
		t.Errorf("findings %v, layer %+v, up %v; want none, healthy, up", classes(tr), tr.Layer, tr.Up)
	}
	s := tr.State
	for name, c := range map[string]struct {
		got  *float64
		want float64
	}{
		"running":      {s.RunningRequests, 60},
		"queued":       {s.QueuedRequests, 3},
		"kv":           {s.KVUsage, 0.6},
		"hit rate":     {s.PrefixHitRate, 0.7},
		"prompt":       {s.PromptTokens, 10000},
		"throughput":   {s.GenThroughput, 2000},
		"finished/s":   {s.FinishedPerSecond, 10},
		"retractions":  {s.RetractionsPerSecond, 0},
		"observed":     {&s.ObservedSeconds, 10},
		"ttft mean":    {s.TTFTMean, 0.35},
		"queue mean":   {s.QueueTimeMean, 0.02},
		"decode moved": {s.DecodeProgress, 20000},
	} {
		if c.got == nil || abs(*c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, deref(c.got), c.want)
		}
	}
	if s.TTFTP99 == nil || *s.TTFTP99 > 0.4 || s.ITLP99 == nil || *s.ITLP99 > 0.05 {
		t.Errorf("TTFT p99 %v, ITL p99 %v: want the fixture's fast latencies", deref(s.TTFTP99), deref(s.ITLP99))
	}
	if s.GenThroughputSource != "decode tokens counter" || s.PrefixHitRateSource != "realtime_tokens_total" {
		t.Errorf("sources %q, %q", s.GenThroughputSource, s.PrefixHitRateSource)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// TestDiagnosePreemptStorm: the one-shot judges a preemption storm on its
// absolute floor, without any baseline.
func TestDiagnosePreemptStorm(t *testing.T) {
	a := engineState{running: 8, queued: 47, kvUsage: 0.97, retracted: 100, decode: 1e6,
		prefillCompute: 5e5, prefillCache: 5e5, finished: 1000,
		ttft: repeat(0.5, 100), queueTime: repeat(0.1, 100), itl: repeat(0.05, 1000), e2e: repeat(5, 100)}
	b := a
	b.retracted += 30 // 3/s: above the critical rate
	b.decode += 3000
	rep := diagnoseOne(t, 10*time.Second, observe(t, "e", 10*time.Second, expo(a), expo(b)))
	tr := rep.Targets[0]
	i := slices.IndexFunc(tr.Findings, func(f FindingEntry) bool { return f.Class == detect.PreemptStorm })
	if i < 0 || tr.Findings[i].Severity != "critical" {
		t.Fatalf("findings %v, want a critical preempt_storm", classes(tr))
	}
	f := tr.Findings[i]
	if f.Runbook != "/runbooks/preempt_storm" || len(f.Emergency) == 0 || f.Diagnosis == "" || len(f.Evidence) == 0 {
		t.Errorf("finding lacks runbook/steps/diagnosis/evidence: %+v", f)
	}
	if f.Evidence[0].Value == nil || *f.Evidence[0].Value != 3 || f.Evidence[0].Baseline != nil {
		t.Errorf("retraction evidence %+v, want 3/s without a baseline", f.Evidence[0])
	}
	if tr.Layer.Verdict != detect.TriageAdmission || tr.Layer.Layer != detect.LayerMemory {
		t.Errorf("layer %+v, want an admission bottleneck on a full KV pool", tr.Layer)
	}
	err := rep.Err()
	if !errors.Is(err, ErrIncident) || !strings.Contains(err.Error(), "1 critical finding") {
		t.Errorf("Err() = %v, want ErrIncident naming the critical finding", err)
	}
}

// TestDiagnoseQueueWaitDominates is the seeds' first worked scenario:
// TTFT 2.8 s of which 2.3 s is queue wait points at the scheduling side.
func TestDiagnoseQueueWaitDominates(t *testing.T) {
	a := engineState{running: 3, queued: 2, kvUsage: 0.3, decode: 1e6, finished: 100,
		ttft: repeat(0.3, 50), queueTime: repeat(0.01, 50), itl: repeat(0.03, 500), e2e: repeat(4, 50)}
	b := a
	b.decode += 5000
	b.finished += 20
	b.ttft = append(slices.Clone(a.ttft), repeat(2.8, 20)...)
	b.queueTime = append(slices.Clone(a.queueTime), repeat(2.3, 20)...)
	b.itl = append(slices.Clone(a.itl), repeat(0.03, 500)...)
	rep := diagnoseOne(t, 10*time.Second, observe(t, "e", 10*time.Second, expo(a), expo(b)))
	l := rep.Targets[0].Layer
	if l.Verdict != detect.TriageAdmission || !strings.Contains(l.Reason, "queue wait") || !strings.Contains(l.NextStep, "scheduling side") {
		t.Errorf("layer %+v, want the scheduling side with queue wait 2.3s of 2.8s", l)
	}
}

// A full queue with no finding is not "OK": the one-shot cannot judge the
// detectors that would page on it, and the verdict and summary say the
// replica is under load pressure. It is not an incident (exit status 0);
// the healthy replica beside it is not named.
func TestDiagnosePressureWithoutAFindingIsNotOK(t *testing.T) {
	pressed := engineState{running: 58, queued: 135, kvUsage: 0.99, decode: 1e6, finished: 100,
		ttft: repeat(0.3, 50), queueTime: repeat(0.01, 50), itl: repeat(0.03, 500), e2e: repeat(4, 50)}
	next := pressed
	next.decode += 15000
	next.finished += 1
	a, b := healthyPair()
	rep, err := Diagnose(Observation{Interval: 10 * time.Second, Samples: 2, Targets: []TargetObservation{
		observe(t, "full", 10*time.Second, expo(pressed), expo(next)),
		observe(t, "calm", 10*time.Second, expo(a), expo(b)),
	}}, detect.DefaultConfig(), Options{Interval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Incident || rep.Err() != nil || len(rep.UnderPressure) != 1 || !strings.HasPrefix(rep.UnderPressure[0], "full: admission bottleneck") {
		t.Fatalf("incident %v, under pressure %q: want no incident and the full replica named", rep.Incident, rep.UnderPressure)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	if want := "\nUNDER PRESSURE: no incident found on 2 replica(s), but 1 under load pressure — full: admission bottleneck"; !strings.Contains(text.String(), want) {
		t.Errorf("no %q in:\n%s", want, text.String())
	}
}

func TestDiagnoseSlowDecodeIsExecutionSide(t *testing.T) {
	a := engineState{running: 5, queued: 0, kvUsage: 0.2, decode: 1e6, finished: 100,
		ttft: repeat(0.2, 50), queueTime: repeat(0.01, 50), itl: repeat(0.03, 500), e2e: repeat(4, 50)}
	b := a
	b.decode += 500
	b.itl = append(slices.Clone(a.itl), repeat(0.5, 100)...)
	rep := diagnoseOne(t, 10*time.Second, observe(t, "e", 10*time.Second, expo(a), expo(b)))
	if l := rep.Targets[0].Layer; l.Verdict != detect.TriageExecution || !strings.Contains(l.Reason, "inter-token p99") {
		t.Errorf("layer %+v, want the single-request execution side", l)
	}
}

// TestDiagnoseStuck: requests held and the decode counter flat over a
// long enough span is "no progress" — an incident; over a short span it
// is not judged.
func TestDiagnoseStuck(t *testing.T) {
	a := engineState{running: 20, queued: 4, kvUsage: 0.5, decode: 1e6, finished: 100,
		ttft: repeat(0.2, 50), queueTime: repeat(0.01, 50), itl: repeat(0.03, 500), e2e: repeat(4, 50)}
	rep := diagnoseOne(t, 15*time.Second, observe(t, "e", 15*time.Second, expo(a), expo(a)))
	if l := rep.Targets[0].Layer; l.Verdict != detect.TriageStuck {
		t.Errorf("frozen engine over 15s: layer %+v, want stuck", l)
	}
	if !errors.Is(rep.Err(), ErrIncident) || !strings.Contains(rep.Summary, "no progress") {
		t.Errorf("Err() = %v, want an incident for no progress", rep.Err())
	}

	rep = diagnoseOne(t, 5*time.Second, observe(t, "e", 5*time.Second, expo(a), expo(a)))
	if l := rep.Targets[0].Layer; l.Verdict == detect.TriageStuck || rep.Incident {
		t.Errorf("5s is shorter than the decode log interval may take: layer %+v, incident %v", l, rep.Incident)
	}
}

func failedScrapes(name string, reason series.ScrapeFailure, status int, msg string, n int, step time.Duration) TargetObservation {
	to := TargetObservation{Target: scrape.Target{Name: name, URL: "http://user:pw@" + name + "/metrics?token=s3cret", Kind: scrape.KindEngine}}
	for i := range n {
		to.Scrapes = append(to.Scrapes, series.Scrape{Target: name, Kind: scrape.KindEngine,
			At: t0.Add(time.Duration(i) * step), Reason: reason, Status: status, Error: msg})
	}
	return to
}

func TestDiagnoseMetricsDisabled(t *testing.T) {
	a, b := healthyPair()
	rep := diagnoseOne(t, 10*time.Second,
		failedScrapes("off:30000", series.FailureHTTPStatus, http.StatusNotFound, "HTTP 404 Not Found", 2, 10*time.Second),
		observe(t, "ok", 10*time.Second, expo(a), expo(b)))
	if len(rep.Targets) != 2 {
		t.Fatalf("%d targets, want 2", len(rep.Targets))
	}
	off := rep.Targets[0]
	if off.Up || off.Failed != 2 || !off.Layer.Down {
		t.Errorf("404 target: up %v, failed %d, layer %q", off.Up, off.Failed, off.Layer.Label)
	}
	if len(off.Errors) != 2 || !strings.Contains(off.Errors[0].Hint, "--enable-metrics") {
		t.Errorf("errors %+v, want the --enable-metrics hint", off.Errors)
	}
	// A 404 is a server that answers: metrics are off, the replica is
	// not dead.
	if got := classes(off); !slices.Contains(got, "metrics_blind:warning") || slices.Contains(got, "replica_down:critical") {
		t.Errorf("findings %v, want metrics_blind warning and no critical replica_down", got)
	}
	if strings.Contains(off.URL, "s3cret") || strings.Contains(off.URL, "pw") {
		t.Errorf("URL %q shows credentials", off.URL)
	}
	if ok := rep.Targets[1]; ok.Incident() {
		t.Errorf("the healthy target is blamed: %v", classes(ok))
	}
	if !errors.Is(rep.Err(), ErrIncident) || !strings.Contains(rep.Summary, "1 replica(s) answering without usable metrics") {
		t.Errorf("summary %q", rep.Summary)
	}
}

// Incident reports whether this replica alone would make the report an
// incident (test helper).
func (tr TargetReport) Incident() bool {
	r := Report{Targets: []TargetReport{tr}}
	r.summarize()
	return r.Incident
}

func TestDiagnoseRestartBetweenScrapes(t *testing.T) {
	a, _ := healthyPair()
	b := engineState{running: 2, queued: 0, kvUsage: 0.05, decode: 300, prefillCompute: 2000, finished: 3,
		ttft: repeat(0.2, 3), queueTime: repeat(0.01, 3), itl: repeat(0.03, 300), e2e: repeat(2, 3)}
	rep := diagnoseOne(t, 10*time.Second, observe(t, "e", 10*time.Second, expo(a), expo(b)))
	if got := classes(rep.Targets[0]); !slices.Contains(got, "replica_restarted:warning") {
		t.Errorf("findings %v, want the restart warning", got)
	}
}

func TestDiagnoseHealthProbeFailure(t *testing.T) {
	a, b := healthyPair()
	to := observe(t, "e", 10*time.Second, expo(a), expo(b))
	to.Health = &scrape.HealthProbe{Status: http.StatusServiceUnavailable, Reason: series.FailureHTTPStatus,
		Error: "HTTP 503 Service Unavailable", Duration: 20 * time.Second}
	rep := diagnoseOne(t, 10*time.Second, to)
	if !rep.Targets[0].Health.Failed() || !errors.Is(rep.Err(), ErrIncident) || !strings.Contains(rep.Summary, "/health_generate") {
		t.Errorf("health %+v, summary %q: want a failed probe reported as an incident", rep.Targets[0].Health, rep.Summary)
	}

	// A target without the endpoint says nothing about the engine.
	to.Health = &scrape.HealthProbe{Status: http.StatusNotFound, Reason: series.FailureHTTPStatus, Error: "HTTP 404"}
	if rep := diagnoseOne(t, 10*time.Second, to); rep.Incident {
		t.Errorf("404 on /health_generate made an incident: %s", rep.Summary)
	}
}

// TestDiagnoseFixtures reads real expositions: the current full one and
// the first 2024 release (legacy names, label "name", no running/queued
// gauges in the capture).
func TestDiagnoseFixtures(t *testing.T) {
	full := readFixture(t, "sglang-current-full.prom")
	rep := diagnoseOne(t, 5*time.Second, observe(t, "cur", 5*time.Second, full, full))
	tr := rep.Targets[0]
	if tr.Model != "Qwen/Qwen3-8B" || tr.EngineType != "unified" || tr.Kind != scrape.KindEngine {
		t.Errorf("replica info %q %q %q", tr.Model, tr.EngineType, tr.Kind)
	}
	s := tr.State
	if deref(s.RunningRequests) != 24.0 || deref(s.QueuedRequests) != 3.0 || deref(s.KVUsage) != 0.41 || deref(s.HTTPInFlight) != 27.0 {
		t.Errorf("state running %v queued %v kv %v in-flight %v; want 24, 3, 0.41, 27 (the /metrics request itself excluded)",
			deref(s.RunningRequests), deref(s.QueuedRequests), deref(s.KVUsage), deref(s.HTTPInFlight))
	}
	if len(tr.Findings) != 0 || rep.Incident {
		t.Errorf("unchanged exposition: findings %v, summary %q", classes(tr), rep.Summary)
	}

	old := readFixture(t, "pr1853-2024-11-first-release-name-label.prom")
	rep = diagnoseOne(t, 5*time.Second, observe(t, "old", 5*time.Second, old, old))
	tr = rep.Targets[0]
	if deref(tr.State.MaxRunningRequests) != 2231.0 || tr.Layer.Verdict != detect.TriageUnknown || len(tr.Findings) != 0 {
		t.Errorf("2024 exposition: cap %v, layer %q, findings %v", deref(tr.State.MaxRunningRequests), tr.Layer.Verdict, classes(tr))
	}
	if !strings.Contains(tr.Model, "Llama-3.2-3B") {
		t.Errorf("model %q from the legacy name label", tr.Model)
	}
}

func TestReportRendering(t *testing.T) {
	a := engineState{running: 8, queued: 47, kvUsage: 0.97, retracted: 100, decode: 1e6, finished: 1000,
		ttft: repeat(0.5, 100), queueTime: repeat(0.1, 100), itl: repeat(0.05, 1000), e2e: repeat(5, 100)}
	b := a
	b.retracted += 30
	b.decode += 3000
	b.itl = append(slices.Clone(a.itl), repeat(0.05, 100)...)
	to := observe(t, "storm", 10*time.Second, expo(a), expo(b))
	to.Health = &scrape.HealthProbe{Up: true, Status: 200, Duration: 30 * time.Millisecond}
	rep, err := Diagnose(Observation{Interval: 10 * time.Second, Samples: 2, Targets: []TargetObservation{
		to, failedScrapes("gone:30000", series.FailureRefused, 0, "dial tcp: connection refused", 2, 10*time.Second),
	}}, detect.DefaultConfig(), Options{Interval: 10 * time.Second, RunbookBase: "https://watchdog.example/"})
	if err != nil {
		t.Fatal(err)
	}

	// Without a baseline, seconds still read as on every page.
	if f := rep.Targets[0].Findings; len(f) == 0 || !regexp.MustCompile(`latency p99 is 0\.0\d+ s \(no baseline\)`).MatchString(f[0].Diagnosis) {
		t.Errorf("findings %+v: want the inter-token p99 in seconds as pages give them, \"0.05 s (no baseline)\"", f)
	}

	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{
		"== storm", "running requests       8", "queued requests        47", "KV cache usage         0.97",
		"/health_generate       OK (HTTP 200 in 30ms)",
		"layer: admission bottleneck", "CRITICAL preempt_storm", "diagnosis: KV cache layer",
		"do now", "1. Stop feeding the storm without dropping work", "runbook: https://watchdog.example/runbooks/preempt_storm",
		"== gone:30000", "refused: dial tcp: connection refused", "-> nothing answers there",
		"layer: down", "not judged by a one-shot", "cache_collapse", "retry_avalanche",
		"INCIDENT: 1 critical finding(s), 1 replica(s) down",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if len(line) > textWidth+30 {
			t.Errorf("line %d is %d wide: %q", i, len(line), line)
		}
	}
	if t.Failed() {
		t.Log(out)
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Incident bool `json:"incident"`
		Targets  []struct {
			Name  string         `json:"name"`
			Up    bool           `json:"up"`
			State map[string]any `json:"state"`
			Layer struct {
				Verdict string
				Down    bool
			}
			Errors   []struct{ Reason, Hint string }
			Findings []struct {
				Class, Severity, Runbook string
				Evidence                 []map[string]any
			}
			Health *struct{ Up bool } `json:"health_generate"`
		} `json:"targets"`
		Detectors []DetectorNote `json:"detectors"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatalf("JSON report does not parse: %v\n%s", err, js.String())
	}
	if !doc.Incident || len(doc.Targets) != 2 || len(doc.Detectors) == 0 {
		t.Fatalf("JSON: incident %v, %d targets, %d detector notes", doc.Incident, len(doc.Targets), len(doc.Detectors))
	}
	st := doc.Targets[0]
	if st.Name != "storm" || !st.Up || st.State["running_requests"] != 8.0 || st.Layer.Verdict != string(detect.TriageAdmission) ||
		st.Health == nil || !st.Health.Up || len(st.Findings) == 0 || st.Findings[0].Class != "preempt_storm" ||
		st.Findings[0].Severity != "critical" || len(st.Findings[0].Evidence) == 0 {
		t.Errorf("JSON storm target: %+v", st)
	}
	gone := doc.Targets[1]
	if gone.Up || len(gone.Errors) != 2 || gone.Errors[0].Reason != "refused" || !gone.Layer.Down {
		t.Errorf("JSON down target: %+v", gone)
	}
}

// TestObserve scrapes real HTTP servers on the command's own schedule.
func TestObserve(t *testing.T) {
	a, _ := healthyPair()
	f, srv := newFakeEngine(t, expo(a))
	_, dead := newFakeEngine(t, "")
	dead.Close()
	targets := []scrape.Target{
		{Name: "up", URL: srv.URL + "/metrics", Kind: scrape.KindEngine},
		{Name: "dead", URL: dead.URL + "/metrics", Kind: scrape.KindEngine},
	}
	const interval = 300 * time.Millisecond
	obs, err := Observe(t.Context(), targets, Options{Interval: interval, Samples: 3, HealthProbe: true, HealthTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	up, down := obs.Targets[0], obs.Targets[1]
	if len(up.Scrapes) != 3 || len(down.Scrapes) != 3 {
		t.Fatalf("%d and %d scrapes, want 3 each", len(up.Scrapes), len(down.Scrapes))
	}
	for i := 1; i < 3; i++ {
		if gap := up.Scrapes[i].At.Sub(up.Scrapes[i-1].At); gap < interval*3/4 {
			t.Errorf("scrapes %d and %d are %v apart, want about %v", i-1, i, gap, interval)
		}
	}
	for _, sc := range up.Scrapes {
		if sc.Reason != "" {
			t.Errorf("scrape of a healthy server failed: %s %s", sc.Reason, sc.Error)
		}
	}
	if down.Scrapes[2].Reason != series.FailureRefused {
		t.Errorf("closed server: reason %q, want refused", down.Scrapes[2].Reason)
	}
	if up.Health == nil || !up.Health.Up || f.hitsOf("/health_generate") != 1 {
		t.Errorf("health %+v after %d probes, want one successful probe", up.Health, f.hitsOf("/health_generate"))
	}
	if down.Health == nil || down.Health.Up || !down.Health.Supported() {
		t.Errorf("dead server's probe %+v, want a failure", down.Health)
	}
}

// TestWithHealth: the probe result rides on the last successful scrape,
// so the window (and the engine_hang detector) sees it; the observation
// itself is not modified.
func TestWithHealth(t *testing.T) {
	own := series.Group{Samples: []series.Sample{{Name: series.NumRunningReqs, Value: 1}}}
	in := []series.Scrape{
		{Target: "e", At: t0, Groups: []series.Group{own}},
		{Target: "e", At: t0.Add(time.Second), Groups: []series.Group{own}},
		{Target: "e", At: t0.Add(2 * time.Second), Reason: series.FailureTimeout},
	}
	out := withHealth(in, &scrape.HealthProbe{Up: true, Status: http.StatusOK, Duration: time.Second})
	has := func(sc series.Scrape) bool {
		for _, g := range sc.Groups {
			for _, s := range g.Samples {
				if s.Name == scrape.HealthGenerateUp {
					return true
				}
			}
		}
		return false
	}
	if has(out[0]) || !has(out[1]) || has(out[2]) {
		t.Errorf("probe samples on scrapes %v %v %v, want only the last successful one", has(out[0]), has(out[1]), has(out[2]))
	}
	if has(in[1]) || len(in[1].Groups[0].Samples) != 1 {
		t.Error("the observation was modified")
	}
	if got := withHealth(in, nil); len(got) != 3 || has(got[1]) {
		t.Error("no probe: scrapes changed")
	}
}

func TestObserveStopsWhenCancelled(t *testing.T) {
	a, _ := healthyPair()
	f, srv := newFakeEngine(t, expo(a))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f.onMetrics = func(int) { cancel() } // the engineer hits Ctrl-C during the first scrape
	start := time.Now()
	_, err := Observe(ctx, []scrape.Target{{Name: "e", URL: srv.URL + "/metrics", Kind: scrape.KindEngine}},
		Options{Interval: time.Minute, Samples: 2})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Observe = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Observe took %v after cancellation, want it to stop waiting", d)
	}
}

func TestOneShotConfig(t *testing.T) {
	const lookback = 15 * time.Second
	cfg, notes, err := OneShotConfig(detect.DefaultConfig(), lookback, 2)
	if err != nil {
		t.Fatalf("OneShotConfig: %v, notes %v", err, notes)
	}
	// Every range a detector compares over is the lookback.
	ranges := map[string]time.Duration{
		"preempt_storm.range": detect.Get[detect.PreemptStormConfig](cfg).Range, "preempt_storm.baseline": detect.Get[detect.PreemptStormConfig](cfg).Baseline,
		"retry_avalanche.range": detect.Get[detect.RetryAvalancheConfig](cfg).Range, "retry_avalanche.baseline": detect.Get[detect.RetryAvalancheConfig](cfg).Baseline,
		"cache_collapse.range": detect.Get[detect.CacheCollapseConfig](cfg).Range, "cache_collapse.baseline": detect.Get[detect.CacheCollapseConfig](cfg).Baseline,
		"kv_saturation.range": detect.Get[detect.KVSaturationConfig](cfg).Range, "kv_saturation.baseline": detect.Get[detect.KVSaturationConfig](cfg).Baseline,
		"engine_hang.range":   detect.Get[detect.EngineHangConfig](cfg).Range,
		"queue_latency.range": detect.Get[detect.QueueLatencyConfig](cfg).Range, "queue_latency.baseline": detect.Get[detect.QueueLatencyConfig](cfg).Baseline,
		"decode_slowdown.range": detect.Get[detect.DecodeSlowdownConfig](cfg).Range, "decode_slowdown.baseline": detect.Get[detect.DecodeSlowdownConfig](cfg).Baseline,
		"lora_thrash.range": detect.Get[detect.LoraThrashConfig](cfg).Range, "lora_thrash.baseline": detect.Get[detect.LoraThrashConfig](cfg).Baseline,
		"pd_transfer_failure.range": detect.Get[detect.PDTransferFailureConfig](cfg).Range, "pd_transfer_failure.baseline": detect.Get[detect.PDTransferFailureConfig](cfg).Baseline,
		"metrics_blind.range": detect.Get[detect.MetricsBlindConfig](cfg).Range,
		"triage.range":        cfg.Triage.Range,
	}
	for name, got := range ranges {
		if got != lookback {
			t.Errorf("%s = %v, want %v", name, got, lookback)
		}
	}
	down, ps := detect.Get[detect.ReplicaDownConfig](cfg), detect.Get[detect.PreemptStormConfig](cfg)
	if down.FailuresToPage != 2 || ps.LegacyMinScrapes != 2 {
		t.Errorf("FailuresToPage %d, LegacyMinScrapes %d; want both 2", down.FailuresToPage, ps.LegacyMinScrapes)
	}
	if base := detect.DefaultConfig(); detect.Get[detect.PreemptStormConfig](base).Range == lookback {
		t.Error("the base config was modified")
	}
	// One note per running detector, in the order New builds them.
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != len(ds) {
		t.Fatalf("%d notes for %d detectors", len(notes), len(ds))
	}
	for i, d := range ds {
		if notes[i].Class != d.Class() || notes[i].Note == "" {
			t.Errorf("note %d = %+v, detector %s", i, notes[i], d.Class())
		}
	}

	// A section whose settings are invalid is switched off and reported
	// last, the rest still runs.
	bad := detect.DefaultConfig()
	detect.Edit(&bad, func(s *detect.CacheCollapseConfig) { s.MaxRatioToBaseline = 3 })
	cfg, notes, err = OneShotConfig(bad, lookback, 2)
	if err != nil || detect.Get[detect.CacheCollapseConfig](cfg).Enabled || !detect.Get[detect.PreemptStormConfig](cfg).Enabled {
		t.Fatalf("invalid cache_collapse: err %v, enabled %v", err, detect.Get[detect.CacheCollapseConfig](cfg).Enabled)
	}
	last := notes[len(notes)-1]
	if len(notes) != len(ds) || last.Class != detect.CacheCollapse || last.Judged || !strings.Contains(last.Note, "not run") ||
		!strings.Contains(last.Note, "detectors.cache_collapse.max_ratio_to_baseline") {
		t.Errorf("notes %+v", notes)
	}
	if _, err := detect.New(cfg); err != nil {
		t.Errorf("adapted config does not build: %v", err)
	}

	// An observation longer than engine_hang's fallback range cannot be
	// shortened to: range would exceed fallback_range.
	cfg, notes, err = OneShotConfig(detect.DefaultConfig(), 6*time.Minute, 40)
	if err != nil || detect.Get[detect.EngineHangConfig](cfg).Enabled {
		t.Fatalf("long observation: err %v, engine_hang enabled %v", err, detect.Get[detect.EngineHangConfig](cfg).Enabled)
	}
	if last := notes[len(notes)-1]; last.Class != detect.EngineHang || !strings.Contains(last.Note, "fallback_range") {
		t.Errorf("notes %+v", notes)
	}

	// Settings no detector can be switched off for fail the command.
	badTriage := detect.DefaultConfig()
	badTriage.Triage.KVFullUsage = 2
	if _, _, err := OneShotConfig(badTriage, lookback, 2); err == nil || !strings.Contains(err.Error(), "detectors.triage.kv_full_usage") {
		t.Errorf("invalid triage: %v", err)
	}
	badOff := detect.DefaultConfig()
	detect.Edit(&badOff, func(s *detect.LoraThrashConfig) { s.Enabled, s.FullUtilization = false, 0 })
	if _, _, err := OneShotConfig(badOff, lookback, 2); err == nil || !strings.Contains(err.Error(), "detectors.lora_thrash.full_utilization") {
		t.Errorf("invalid disabled lora_thrash: %v", err)
	}
}

func TestDetectorNotes(t *testing.T) {
	base := detect.DefaultConfig()
	detect.Edit(&base, func(s *detect.PDTransferFailureConfig) { s.Enabled = false })
	_, notes, err := OneShotConfig(base, 15*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	judged := map[detect.Class]bool{}
	for _, n := range notes {
		judged[n.Class] = n.Judged
		if n.Note == "" {
			t.Errorf("%s: no note", n.Class)
		}
	}
	if _, ok := judged[detect.PDTransferFailure]; ok {
		t.Error("a disabled detector has a note")
	}
	for c, want := range map[detect.Class]bool{
		detect.ReplicaDown: true, detect.PreemptStorm: true, detect.CacheCollapse: false, detect.RetryAvalanche: false,
		detect.QueueLatency: false, detect.ColdStart: true, detect.MetricsBlind: true,
	} {
		if got, ok := judged[c]; !ok || got != want {
			t.Errorf("%s judged = %v (present %v), want %v", c, got, ok, want)
		}
	}
}
