package detect_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// This file is a small scripted-scrape harness in the spirit of promqltest:
// a scenario lists series as functions of the time elapsed since the start
// (counters by their per-second rate, integrated scrape by scrape; gauges by
// their value; histograms by observation rate and observed value), plus
// restarts and scrape failures. run feeds the real window.Store one scrape
// every step and returns it with "now" = the time of the last scrape.

var start = time.Date(2026, 5, 29, 13, 0, 0, 0, time.UTC)

type fn = func(el time.Duration) float64

func constant(v float64) fn { return func(time.Duration) float64 { return v } }

// stepAt is before until at, after from then on.
func stepAt(at time.Duration, before, after float64) fn {
	return func(el time.Duration) float64 {
		if el < at {
			return before
		}
		return after
	}
}

// doublingFrom is v until at, then doubles every period.
func doublingFrom(at time.Duration, v float64, period time.Duration) fn {
	return func(el time.Duration) float64 {
		if el < at {
			return v
		}
		return v * math.Pow(2, float64(el-at)/float64(period))
	}
}

type kind int

const (
	counterKind kind = iota
	gaugeKind
	histKind
)

type metric struct {
	kind   kind
	name   string
	labels []string // name, value pairs
	f      fn       // counter: rate/s; gauge: value; histogram: observations/s
	value  fn       // histogram: the value observed
	bounds []float64
	init   float64 // counter: value at the start (a long-running process)
	// slow, when set, is a second population of a histogram: a share of
	// the observations (slowShare) takes the value slow instead.
	slow      fn
	slowShare float64
	// corrupt, when it returns true, replaces the emitted value at that
	// scrape (NaN/Inf injection); the true value keeps accumulating.
	corrupt func(el time.Duration) (float64, bool)
}

func counter(name string, rate fn, labels ...string) metric {
	return metric{kind: counterKind, name: name, f: rate, labels: labels, init: 1e6}
}

func gauge(name string, v fn, labels ...string) metric {
	return metric{kind: gaugeKind, name: name, f: v, labels: labels}
}

func hist(name string, bounds []float64, rate, value fn) metric {
	return metric{kind: histKind, name: name, f: rate, value: value, bounds: bounds}
}

// withTail gives a histogram a second, slow population: share of the
// observations take the value slow.
func (m metric) withTail(share float64, slow fn) metric {
	m.slowShare, m.slow = share, slow
	return m
}

func (m metric) key() string { return m.name + "{" + strings.Join(m.labels, ",") + "}" }

func (m metric) corrupted(c func(el time.Duration) (float64, bool)) metric {
	m.corrupt = c
	return m
}

type failure struct {
	from, to time.Duration // elapsed, inclusive
	reason   series.ScrapeFailure
	status   int // HTTP status of the answer, 0 when none
	error    string
	probeUp  *bool // the health probe taken beside the failed scrape; nil: none
}

type scenario struct {
	target, kind, model string
	engineType          string // "" means unified
	step, length        time.Duration
	metrics             []metric
	restarts            []time.Duration // every counter resets to 0 here
	failures            []failure
	// labels are the replica's own (a GPU's identity and pod); nil for an
	// engine.
	labels map[string]string
	// pod is the Kubernetes status discovery reports at elapsed time el;
	// nil (or a nil result) for a target not discovered from Kubernetes.
	pod func(el time.Duration) *series.Pod
}

func (s *scenario) podAt(el time.Duration) *series.Pod {
	if s.pod == nil {
		return nil
	}
	return s.pod(el)
}

func newScenario(metrics ...metric) *scenario {
	return &scenario{target: "sglang-0", kind: "engine", model: "Qwen/Qwen3-8B",
		step: 5 * time.Second, length: 65 * time.Minute, metrics: metrics}
}

// with replaces the metrics of the same name and labels, or adds them.
func (s *scenario) with(ms ...metric) *scenario {
	for _, m := range ms {
		replaced := false
		for i := range s.metrics {
			if s.metrics[i].key() == m.key() {
				s.metrics[i], replaced = m, true
			}
		}
		if !replaced {
			s.metrics = append(s.metrics, m)
		}
	}
	return s
}

// without drops whole families.
func (s *scenario) without(names ...string) *scenario {
	var kept []metric
	for _, m := range s.metrics {
		drop := false
		for _, n := range names {
			drop = drop || m.name == n
		}
		if !drop {
			kept = append(kept, m)
		}
	}
	s.metrics = kept
	return s
}

func labelsOf(pairs ...string) series.Labels {
	var ls series.Labels
	for i := 0; i+1 < len(pairs); i += 2 {
		ls = append(ls, series.Label{Name: pairs[i], Value: pairs[i+1]})
	}
	return ls.Sort()
}

// run feeds the scenario into a fresh store sized for cfg and returns the
// store and the time of the last scrape.
func (s *scenario) run(t testing.TB, cfg detect.Config) (*window.Store, time.Time) {
	t.Helper()
	store, err := window.New(window.Options{Retention: cfg.MaxLookback() + 5*time.Minute, ScrapeInterval: s.step}, nil)
	if err != nil {
		t.Fatal(err)
	}
	counters := make([]float64, len(s.metrics))
	type histState struct {
		buckets    []float64
		sum, count float64
	}
	hists := make([]histState, len(s.metrics))
	for i, m := range s.metrics {
		counters[i] = m.init
		hists[i].buckets = make([]float64, len(m.bounds))
		if m.kind == histKind {
			hists[i].count = 1000 // a long-running process
		}
	}
	restarts := append([]time.Duration(nil), s.restarts...)
	var now time.Time
	for el := time.Duration(0); el <= s.length; el += s.step {
		now = start.Add(el)
		if len(restarts) > 0 && el >= restarts[0] {
			restarts = restarts[1:]
			for i := range counters {
				counters[i] = 0
				hists[i] = histState{buckets: make([]float64, len(s.metrics[i].bounds))}
			}
		}
		failed := false
		for _, f := range s.failures {
			if el >= f.from && el <= f.to {
				failed = true
				if err := store.Append(series.Scrape{Target: s.target, Kind: s.kind, At: now, Reason: f.reason, Status: f.status, Error: f.error, Pod: s.podAt(el), ProbeUp: f.probeUp}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Counters advance even while scrapes fail: the server keeps working.
		var samples []series.Sample
		emit := func(m metric, name string, ls series.Labels, v float64) {
			if m.corrupt != nil {
				if cv, ok := m.corrupt(el); ok {
					v = cv
				}
			}
			samples = append(samples, series.Sample{Name: name, Labels: ls, Value: v})
		}
		sec := s.step.Seconds()
		for i, m := range s.metrics {
			ls := labelsOf(m.labels...)
			switch m.kind {
			case counterKind:
				counters[i] += m.f(el) * sec
				emit(m, m.name, ls, counters[i])
			case gaugeKind:
				emit(m, m.name, ls, m.f(el))
			case histKind:
				h := &hists[i]
				total := m.f(el) * sec
				type part struct{ n, v float64 }
				parts := []part{{total, m.value(el)}}
				if m.slow != nil {
					parts = []part{{total * (1 - m.slowShare), m.value(el)}, {total * m.slowShare, m.slow(el)}}
				}
				for _, pt := range parts {
					for b, ub := range m.bounds {
						if pt.v <= ub {
							h.buckets[b] += pt.n
						}
					}
					h.count += pt.n
					h.sum += pt.n * pt.v
				}
				for b, ub := range m.bounds {
					emit(m, m.name+"_bucket", labelsOf("le", strconv.FormatFloat(ub, 'g', -1, 64)), h.buckets[b])
				}
				emit(m, m.name+"_bucket", labelsOf("le", "+Inf"), h.count)
				emit(m, m.name+"_sum", nil, h.sum)
				emit(m, m.name+"_count", nil, h.count)
			}
		}
		if failed {
			continue
		}
		engineType := s.engineType
		if engineType == "" {
			engineType = "unified"
		}
		err := store.Append(series.Scrape{Target: s.target, Kind: s.kind, At: now, Pod: s.podAt(el),
			Groups: []series.Group{{Model: s.model, EngineType: engineType, Labels: s.labels, Samples: samples}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	return store, now
}

// detectWith runs one class's detector (built from cfg) on the scenario's
// replica at the end of the scenario.
func detectWith(t *testing.T, s *scenario, cfg detect.Config, class detect.Class) []detect.Finding {
	t.Helper()
	store, now := s.run(t, cfg)
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var d detect.Detector
	for _, x := range ds {
		if x.Class() == class {
			d = x
		}
	}
	if d == nil {
		t.Fatalf("no %s detector", class)
	}
	var out []detect.Finding
	if !store.View(s.target, func(w detect.Window) { out = d.Detect(w, now) }) {
		t.Fatalf("replica %s not in the store", s.target)
	}
	// Detectors are pure: the same window and time give the same findings.
	var again []detect.Finding
	store.View(s.target, func(w detect.Window) { again = d.Detect(w, now) })
	if len(again) != len(out) {
		t.Fatalf("detector is not deterministic: %d then %d findings", len(out), len(again))
	}
	checkSeverityDeclared(t, out)
	return out
}

func run(t *testing.T, s *scenario, class detect.Class) []detect.Finding {
	t.Helper()
	return detectWith(t, s, detect.DefaultConfig(), class)
}

// Latency buckets of the current SGLang release (reference §4).
var (
	ttftBounds = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	itlBounds  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8}
	e2eBounds  = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400}
)

const chat = "/v1/chat/completions"

// healthyEngine is a busy, healthy SGLang replica: 10 requests/s, 40
// running, a short queue, KV half full, 70% prefix hits, no retractions.
func healthyEngine() *scenario {
	return newScenario(
		counter(series.HTTPRequestsTotal, constant(10), "endpoint", chat, "method", "POST"),
		counter(series.HTTPRequestsTotal, constant(0.2), "endpoint", "/metrics", "method", "GET"),
		counter(series.HTTPRequestsTotal, constant(0.1), "endpoint", "/health_generate", "method", "GET"),
		counter(series.HTTPResponsesTotal, constant(10), "endpoint", chat, "method", "POST", "status_code", "200"),
		counter(series.NumRequestsTotal, constant(10)),
		counter(series.NumAbortedRequestsTotal, constant(0.01)),
		gauge(series.HTTPRequestsActive, constant(42), "endpoint", chat, "method", "POST"),
		gauge(series.NumRunningReqs, constant(40)),
		gauge(series.NumQueueReqs, constant(2)),
		gauge(series.TokenUsage, constant(0.5)),
		gauge(series.FullTokenUsage, constant(0.5)),
		gauge(series.NumUsedTokens, constant(200000)),
		gauge(series.MaxTotalNumTokens, constant(400000)),
		gauge(series.PageSize, constant(16)),
		gauge(series.CacheHitRateGauge, constant(0.7)),
		counter(series.RetractedRequestsTotal, constant(0.001)),
		counter(series.RetractedInputTokens, constant(1)),
		counter(series.RetractedOutputTokens, constant(0.5)),
		gauge(series.NumRetractedReqsGauge, constant(0), "pid", "4242"),
		counter(series.PrefillEffectiveTokens, constant(3000), "mode", "input"),
		counter(series.PrefillEffectiveTokens, constant(7000), "mode", "device_hit"),
		counter(series.PrefillEffectiveTokens, constant(0), "mode", "host_hit"),
		counter(series.PrefillEffectiveTokens, constant(0), "mode", "storage_hit"),
		counter(series.RealtimeTokensTotal, constant(3000), "mode", "prefill_compute"),
		counter(series.RealtimeTokensTotal, constant(7000), "mode", "prefill_cache"),
		counter(series.RealtimeTokensTotal, constant(3000), "mode", "decode"),
		counter(series.PromptTokensTotal, constant(10000)),
		counter(series.CachedTokensTotal, constant(7000), "cache_source", "device"),
		counter(series.EvictedTokensTotal, constant(500), "cache_type", "RadixCache"),
		hist(series.TTFTSeconds, ttftBounds, constant(10), constant(0.3)),
		hist(series.InterTokenLatency, itlBounds, constant(300), constant(0.028)),
		hist(series.E2ERequestLatency, e2eBounds, constant(10), constant(5)),
	)
}

// Times of the scripted incidents: the scenario runs 65 minutes and an
// incident starts where the detector's range does (2 minutes before the end
// for preempt_storm and retry_avalanche, 5 for cache_collapse), so the
// baseline hour before it is healthy (the incident begins one second after
// the range starts, so the scrape on the boundary is still healthy).
const (
	minute       = time.Minute
	incident     = 63*time.Minute + time.Second
	incidentLong = 60*time.Minute + time.Second
)

func evidenceNamed(t *testing.T, f detect.Finding, prefix string) detect.Evidence {
	t.Helper()
	for _, e := range f.Evidence {
		if strings.HasPrefix(e.Name, prefix) {
			return e
		}
	}
	var names []string
	for _, e := range f.Evidence {
		names = append(names, e.Name)
	}
	t.Fatalf("no evidence %q in %v", prefix, names)
	return detect.Evidence{}
}

func approx(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// one asserts exactly one finding and returns it.
func one(t *testing.T, fs []detect.Finding) detect.Finding {
	t.Helper()
	if len(fs) != 1 {
		t.Fatalf("got %d findings, want 1: %+v", len(fs), fs)
	}
	return fs[0]
}

func none(t *testing.T, fs []detect.Finding) {
	t.Helper()
	for _, f := range fs {
		t.Errorf("unexpected %s finding (%s): %s | %s", f.Class, f.Severity, f.Summary, f.Diagnosis)
	}
}

// every returns a corruption that emits v at every nth scrape.
func every(n int, v float64) func(el time.Duration) (float64, bool) {
	return func(el time.Duration) (float64, bool) {
		return v, int(el/(5*time.Second))%n == 0
	}
}

func always(v float64) func(time.Duration) (float64, bool) {
	return func(time.Duration) (float64, bool) { return v, true }
}

// checkCommon asserts the fields every finding must carry.
func checkCommon(t *testing.T, f detect.Finding, class detect.Class) {
	t.Helper()
	if f.Class != class || f.Replica != "sglang-0" || f.Model != "Qwen/Qwen3-8B" || f.Runbook != detect.RunbookPath(class) {
		t.Errorf("finding header = %s %s %s %s", f.Class, f.Replica, f.Model, f.Runbook)
	}
	if f.Summary == "" || f.Diagnosis == "" || len(f.Emergency) == 0 || len(f.RootCause) == 0 || len(f.Evidence) == 0 {
		t.Errorf("finding incomplete: %+v", f)
	}
	for _, e := range f.Evidence {
		if math.IsNaN(e.Value) || math.IsInf(e.Value, 0) || math.IsNaN(e.Baseline) || math.IsInf(e.Baseline, 0) {
			t.Errorf("evidence %q is not finite: %+v", e.Name, e)
		}
	}
}

// More bucket layouts of the current release (reference §4).
var (
	queueBounds  = []float64{0, 0.001, 0.005, 0.010, 0.050, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300}
	genTokBounds = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000}
)

// fullEngine is healthyEngine with the rest of a current release's core
// families: queue time, output lengths, decode batch size, throughput, CPU,
// absolute KV slots, context length. 10 requests/s of 1000 prompt and 300
// output tokens, 40 running at about 1500 tokens each.
func fullEngine() *scenario {
	return healthyEngine().with(
		counter(series.GenerationTokensTotal, constant(3000)),
		hist(series.GenerationTokensHist, genTokBounds, constant(10), constant(300)),
		hist(series.QueueTimeSeconds, queueBounds, constant(10), constant(0.05)),
		gauge(series.DecodeSumSeqLens, constant(60000)),
		gauge(series.GenThroughput, constant(3000)),
		gauge(series.KVAvailableTokens, constant(150000)),
		gauge(series.KVEvictableTokens, constant(50000)),
		gauge(series.KVUsedTokens, constant(200000)),
		gauge(series.ContextLen, constant(32768)),
		counter(series.ProcessCPUSecondsTotal, constant(0.5), "component", "tokenizer"),
	)
}

// stopCounters makes every counter and histogram of the engine stand still
// from at on (the watchdog's own /metrics and probe requests keep being
// counted by the HTTP middleware).
func (s *scenario) stopCounters(at time.Duration) *scenario {
	for i := range s.metrics {
		m := &s.metrics[i]
		if m.kind == gaugeKind {
			continue
		}
		own := false
		for j := 0; j+1 < len(m.labels); j += 2 {
			own = own || (m.labels[j] == "endpoint" && (m.labels[j+1] == "/metrics" || m.labels[j+1] == "/health_generate"))
		}
		if own {
			continue
		}
		f := m.f
		m.f = func(el time.Duration) float64 {
			if el >= at {
				return 0
			}
			return f(el)
		}
	}
	return s
}

// withTriage asserts the finding carries a layer triage with the verdict,
// once: in its triage line, not again in the diagnosis.
func withTriage(t *testing.T, f detect.Finding, want detect.TriageVerdict) {
	t.Helper()
	if f.TriageVerdict != want || !strings.Contains(f.Triage, "Next step:") || strings.Contains(f.Diagnosis, "Layer triage:") {
		t.Errorf("triage = %q (%s), want %s; diagnosis: %s", f.Triage, f.TriageVerdict, want, f.Diagnosis)
	}
}

func contains(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q: %s", what, w, text)
		}
	}
}
