package diagnose

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// TestMain checks that no test leaves a goroutine behind (probes, scrape
// rounds, idle connections of the command's own client).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the synthetic time of the first scrape in fixture tests.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// engineState is one scrape's worth of an SGLang engine, rendered by
// expo. Counters are cumulative; histograms are given as every
// observation so far.
type engineState struct {
	running, queued, kvUsage  float64
	retracted, aborted        float64
	decode, prefillCompute    float64
	prefillCache, finished    float64
	ttft, queueTime, itl, e2e []float64
}

var latencyBounds = []float64{0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 3, 4, 6, 8, 10, 20, 40}

func histogram(b *strings.Builder, name string, obs []float64) {
	fmt.Fprintf(b, "# TYPE %s histogram\n", name)
	sum := 0.0
	for _, o := range obs {
		sum += o
	}
	for _, le := range latencyBounds {
		n := 0
		for _, o := range obs {
			if o <= le {
				n++
			}
		}
		fmt.Fprintf(b, "%s_bucket{le=\"%g\",model_name=\"m\"} %d\n", name, le, n)
	}
	fmt.Fprintf(b, "%s_bucket{le=\"+Inf\",model_name=\"m\"} %d\n", name, len(obs))
	fmt.Fprintf(b, "%s_sum{model_name=\"m\"} %g\n%s_count{model_name=\"m\"} %d\n", name, sum, name, len(obs))
}

// expo renders s as a current-release exposition.
func expo(s engineState) string {
	var b strings.Builder
	gauge := func(name string, v float64) {
		fmt.Fprintf(&b, "# TYPE %s gauge\n%s{model_name=\"m\"} %g\n", name, name, v)
	}
	counter := func(name, labels string, v float64) {
		fmt.Fprintf(&b, "%s{model_name=\"m\"%s} %g\n", name, labels, v)
	}
	gauge(series.NumRunningReqs, s.running)
	gauge(series.NumQueueReqs, s.queued)
	gauge(series.TokenUsage, s.kvUsage)
	b.WriteString("# TYPE sglang:num_retracted_requests_total counter\n")
	counter(series.RetractedRequestsTotal, "", s.retracted)
	b.WriteString("# TYPE sglang:num_aborted_requests_total counter\n")
	counter(series.NumAbortedRequestsTotal, "", s.aborted)
	b.WriteString("# TYPE sglang:num_requests_total counter\n")
	counter(series.NumRequestsTotal, "", s.finished)
	b.WriteString("# TYPE sglang:realtime_tokens_total counter\n")
	counter(series.RealtimeTokensTotal, `,mode="decode"`, s.decode)
	counter(series.RealtimeTokensTotal, `,mode="prefill_compute"`, s.prefillCompute)
	counter(series.RealtimeTokensTotal, `,mode="prefill_cache"`, s.prefillCache)
	histogram(&b, series.TTFTSeconds, s.ttft)
	histogram(&b, series.QueueTimeSeconds, s.queueTime)
	histogram(&b, series.InterTokenLatency, s.itl)
	histogram(&b, series.E2ERequestLatency, s.e2e)
	return b.String()
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// fakeEngine serves whatever body it was last given, and
// /health_generate with healthStatus.
type fakeEngine struct {
	mu           sync.Mutex
	body         string
	healthStatus int
	hits         map[string]int
	onMetrics    func(n int) // called with the count of /metrics requests so far
}

func newFakeEngine(t *testing.T, body string) (*fakeEngine, *httptest.Server) {
	t.Helper()
	f := &fakeEngine{body: body, healthStatus: http.StatusOK, hits: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.hits[r.URL.Path]++
	n, body, status, hook := f.hits[r.URL.Path], f.body, f.healthStatus, f.onMetrics
	f.mu.Unlock()
	switch r.URL.Path {
	case "/metrics":
		if hook != nil {
			hook(n)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	case "/health_generate":
		w.WriteHeader(status)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeEngine) set(body string) {
	f.mu.Lock()
	f.body = body
	f.mu.Unlock()
}

func (f *fakeEngine) hitsOf(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

// observe scrapes bodies in turn from a fake engine named name, stamping
// the scrapes every step from t0 (synthetic times: the window and the
// detectors only see At).
func observe(t *testing.T, name string, step time.Duration, bodies ...string) TargetObservation {
	t.Helper()
	f, srv := newFakeEngine(t, "")
	tgt := scrape.Target{Name: name, URL: srv.URL + "/metrics", Kind: scrape.KindEngine}
	to := TargetObservation{Target: tgt}
	for i, b := range bodies {
		f.set(b)
		sc := scrape.ScrapeOnce(t.Context(), srv.Client(), tgt, scrape.Options{})
		if sc.Reason != "" {
			t.Fatalf("scrape %d of fixture: %s %s", i, sc.Reason, sc.Error)
		}
		sc.At = t0.Add(time.Duration(i) * step)
		to.Scrapes = append(to.Scrapes, sc)
	}
	return to
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := fixture.SGLang(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// diagnoseOne diagnoses one observation with the default detectors.
func diagnoseOne(t *testing.T, step time.Duration, tos ...TargetObservation) *Report {
	t.Helper()
	n := 0
	for _, to := range tos {
		n = max(n, len(to.Scrapes))
	}
	rep, err := Diagnose(Observation{Interval: step, Samples: n, Targets: tos}, detect.DefaultConfig(), Options{Interval: step, Samples: n})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func classes(tr TargetReport) []string {
	var out []string
	for _, f := range tr.Findings {
		out = append(out, string(f.Class)+":"+f.Severity)
	}
	sort.Strings(out)
	return out
}
