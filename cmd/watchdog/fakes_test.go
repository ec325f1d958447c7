package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// engineLoad is what a fake SGLang engine is going through: the rates its
// counters advance at and the values of its gauges and latencies. Every
// request takes the same latencies, so each histogram's observations fall
// in one bucket.
type engineLoad struct {
	RequestsPerSecond    float64 // arrivals, all completed
	PromptTokens         float64 // per request
	OutputTokens         float64 // per request
	HitRate              float64 // share of prompt tokens served from the prefix cache
	RetractionsPerSecond float64
	KVUsage              float64 // sglang:token_usage
	Running, Queued      float64
	TTFT                 float64 // seconds
	QueueTime            float64 // seconds
	ITL                  float64 // seconds
}

// healthyLoad is a replica serving steady traffic well: a warm prefix
// cache, room in the KV pool, a short queue.
func healthyLoad() engineLoad {
	return engineLoad{
		RequestsPerSecond: 10, PromptTokens: 1000, OutputTokens: 200, HitRate: 0.8,
		KVUsage: 0.6, Running: 20, Queued: 1,
		TTFT: 0.3, QueueTime: 0.04, ITL: 0.02,
	}
}

// Bucket bounds of the fake's histograms: a subset of SGLang's, enough
// to tell the latencies the tests use apart (few buckets keep the tests
// fast under -race).
var (
	fakeTTFTBounds      = []float64{0.2, 0.4, 1, 2, 4, 8, 20}
	fakeQueueTimeBounds = []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 4, 10}
	fakeITLBounds       = []float64{0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1}
)

// fakeHistogram is a cumulative Prometheus histogram built from
// observations.
type fakeHistogram struct {
	bounds []float64
	counts []float64 // per bucket, the last one is +Inf
	sum    float64
}

func newFakeHistogram(bounds []float64) *fakeHistogram {
	return &fakeHistogram{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

func (h *fakeHistogram) observe(v, n float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // first bound >= v
	h.counts[i] += n
	h.sum += v * n
}

func (h *fakeHistogram) write(b *strings.Builder, name, labels string) {
	fmt.Fprintf(b, "# TYPE %s histogram\n", name)
	inner := strings.TrimSuffix(strings.TrimPrefix(labels, "{"), "}")
	cum := 0.0
	for i, c := range h.counts {
		cum += c
		le := "+Inf"
		if i < len(h.bounds) {
			le = fmt.Sprint(h.bounds[i])
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=%q} %g\n", name, inner, le, cum)
	}
	fmt.Fprintf(b, "%s_sum%s %g\n%s_count%s %g\n", name, labels, h.sum, name, labels, cum)
}

// fakeEngine serves an SGLang engine's /metrics (current release names and
// labels) whose counters advance with the bubble's clock at the rates of
// its load: what it exposes depends only on the load over time, not on how
// often it is scraped or probed. /health_generate answers 200.
type fakeEngine struct {
	model string

	mu       sync.Mutex
	load     engineLoad
	last     time.Time // when the counters were last advanced
	counters map[string]float64
	ttft     *fakeHistogram
	queue    *fakeHistogram
	itl      *fakeHistogram
}

func newFakeEngine(model string, load engineLoad) *fakeEngine {
	return &fakeEngine{model: model, load: load, counters: map[string]float64{},
		ttft: newFakeHistogram(fakeTTFTBounds), queue: newFakeHistogram(fakeQueueTimeBounds), itl: newFakeHistogram(fakeITLBounds)}
}

// set changes the load from now on.
func (f *fakeEngine) set(change func(*engineLoad)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(time.Now())
	change(&f.load)
}

// advance accrues the counters and histograms up to now at the current
// load. f.mu is held.
func (f *fakeEngine) advance(now time.Time) {
	if f.last.IsZero() {
		f.last = now
		return
	}
	dt := now.Sub(f.last).Seconds()
	f.last = now
	if dt <= 0 {
		return
	}
	l := f.load
	reqs := l.RequestsPerSecond * dt
	prompt := reqs * l.PromptTokens
	f.counters["http"] += reqs
	f.counters["done"] += reqs
	f.counters["prompt"] += prompt
	f.counters["cached"] += prompt * l.HitRate
	f.counters["gen"] += reqs * l.OutputTokens
	f.counters["retracted"] += l.RetractionsPerSecond * dt
	f.ttft.observe(l.TTFT, reqs)
	f.queue.observe(l.QueueTime, reqs)
	f.itl.observe(l.ITL, reqs*l.OutputTokens)
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		io.WriteString(w, "OK") // /health_generate: the engine generates
		return
	}
	f.mu.Lock()
	f.advance(time.Now())
	l := f.load
	var b strings.Builder
	sched := fmt.Sprintf(`{engine_type="unified",model_name=%q,moe_ep_rank="0",pp_rank="0",tp_rank="0"}`, f.model)
	tok := fmt.Sprintf(`{model_name=%q}`, f.model)
	gauge := func(name string, v float64) {
		fmt.Fprintf(&b, "# TYPE sglang:%s gauge\nsglang:%s%s %g\n", name, name, sched, v)
	}
	counter := func(name, labels string, v float64) {
		fmt.Fprintf(&b, "# TYPE sglang:%s counter\nsglang:%s%s %g\n", name, name, labels, v)
	}
	gauge("num_running_reqs", l.Running)
	gauge("num_queue_reqs", l.Queued)
	gauge("token_usage", l.KVUsage)
	gauge("gen_throughput", l.RequestsPerSecond*l.OutputTokens)
	counter("num_retracted_requests_total", sched, f.counters["retracted"])
	counter("prompt_tokens_total", tok, f.counters["prompt"])
	counter("cached_tokens_total", tok, f.counters["cached"])
	counter("generation_tokens_total", tok, f.counters["gen"])
	counter("num_requests_total", tok, f.counters["done"])
	counter("num_aborted_requests_total", tok, 0)
	counter("http_requests_total", `{endpoint="/v1/chat/completions",method="POST"}`, f.counters["http"])
	f.ttft.write(&b, "sglang:time_to_first_token_seconds", tok)
	f.queue.write(&b, "sglang:queue_time_seconds", sched)
	f.itl.write(&b, "sglang:inter_token_latency_seconds", tok)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(w, b.String())
}

// daemonRun is the real daemon watching fake engines over an in-memory
// network inside a synctest bubble, with recording integrations in place
// of Slack and PagerDuty.
type daemonRun struct {
	start  time.Time
	rec    *recorder
	stderr *lockedBuffer
	stop   func() error
	// api reaches the daemon's HTTP server over the bubble's network.
	api  *http.Client
	addr string
}

// startDaemon serves each engine on the bubble's network under its name
// and runs daemon() with the configuration yaml (over the defaults) and
// those targets. It must be called inside a synctest bubble, and stop
// must be called before the bubble ends.
func startDaemon(t *testing.T, yaml string, engines map[string]*fakeEngine) *daemonRun {
	t.Helper()
	return startDaemonWith(t, yaml, engines, nil)
}

// startDaemonWith is startDaemon with setup run on the bubble's network
// and the configuration before the daemon starts (to serve more fakes
// and point the configuration at them).
func startDaemonWith(t *testing.T, yaml string, engines map[string]*fakeEngine, setup func(network *memnet.Network, cfg *config.Config)) *daemonRun {
	t.Helper()
	return startDaemonRecording(t, yaml, engines, setup, notify.IntegrationPagerDuty, notify.IntegrationSlack)
}

// startDaemonRecording is startDaemonWith with the recorder added as the
// integrations named recordAs: in place of PagerDuty and Slack, or beside
// the ones setup configures under a name of its own.
func startDaemonRecording(t *testing.T, yaml string, engines map[string]*fakeEngine, setup func(network *memnet.Network, cfg *config.Config), recordAs ...string) *daemonRun {
	t.Helper()
	cfg, err := config.Parse(config.Default(), []byte(yaml))
	if err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	network := memnet.New()
	var servers []*http.Server
	for _, name := range slices.Sorted(maps.Keys(engines)) {
		ln, err := network.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: engines[name], ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go srv.Serve(ln)
		cfg.Targets = append(cfg.Targets, config.Target{Name: name, URL: "http://" + ln.Addr().String(), Kind: "engine"})
	}
	if setup != nil {
		setup(network, &cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test configuration: %v", err)
	}
	run := &daemonRun{start: time.Now(), rec: &recorder{}, stderr: &lockedBuffer{},
		api: &http.Client{Transport: &http.Transport{DialContext: network.DialContext}}}
	var stdout lockedBuffer
	listening := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var recorders []notify.Integration
	for _, name := range recordAs {
		recorders = append(recorders, notify.Integration{Name: name, Notifier: run.rec.as(name)})
	}
	go func() {
		done <- daemon(ctx, cfg, daemonIO{
			stdout: &stdout, stderr: run.stderr,
			dial: network.DialContext, listen: network.Listen,
			started:           func(addr string) { listening <- addr },
			extraIntegrations: recorders,
		})
	}()
	select {
	case run.addr = <-listening:
	case err := <-done:
		t.Fatalf("daemon: %v\nlog:\n%s", err, run.stderr.String())
	}
	stopped := false
	run.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := <-done
		run.api.CloseIdleConnections()
		for _, s := range servers {
			s.Close()
		}
		network.Close()
		return err
	}
	t.Cleanup(func() { run.stop() })
	return run
}

// findings returns, per replica, the classes the detectors found in the
// daemon's last evaluation round, as its API shows them.
func (r *daemonRun) findings(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for replica, fs := range r.apiFindings(t) {
		out[replica] = []string{}
		for _, f := range fs {
			out[replica] = append(out[replica], f.Class)
		}
		slices.Sort(out[replica])
	}
	return out
}

// apiFinding is a finding as the daemon's API shows it.
type apiFinding struct{ Class, Severity string }

// apiFindings returns, per replica, the findings of the daemon's last
// evaluation round from GET /api/v1/watchdog/targets.
func (r *daemonRun) apiFindings(t *testing.T) map[string][]apiFinding {
	t.Helper()
	resp, err := r.api.Get("http://" + r.addr + "/api/v1/watchdog/targets")
	if err != nil {
		t.Fatalf("GET /api/v1/watchdog/targets: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Targets []struct {
			Replica  string
			Findings []apiFinding
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /api/v1/watchdog/targets: %v", err)
	}
	out := map[string][]apiFinding{}
	for _, tg := range body.Targets {
		out[tg.Replica] = tg.Findings
	}
	return out
}

// events are the distinct events the integrations received (one per
// fingerprint and sequence, whichever integrations it reached), in the
// order they were produced.
func (r *daemonRun) events() []notify.Event {
	var out []notify.Event
	seen := map[string]bool{}
	for _, rec := range r.rec.all() {
		key := fmt.Sprintf("%s/%d", rec.ev.Fingerprint, rec.ev.Seq)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, rec.ev)
	}
	slices.SortStableFunc(out, func(a, b notify.Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		if a.Fingerprint != b.Fingerprint {
			return strings.Compare(a.Fingerprint, b.Fingerprint)
		}
		return int(a.Seq) - int(b.Seq)
	})
	return out
}

// timeline renders the events in bubble time since the daemon started.
func (r *daemonRun) timeline(marks map[time.Duration]string) string {
	type row struct {
		at   time.Duration
		text string
	}
	var rows []row
	for at, text := range marks {
		rows = append(rows, row{at, fmt.Sprintf("t+%s ── %s", clock(at), text)})
	}
	for _, ev := range r.events() {
		at := ev.At.Sub(r.start)
		where := ev.Replica
		if ev.Fleet {
			where = "fleet " + ev.Model
		}
		rows = append(rows, row{at, fmt.Sprintf("t+%s %-7s %-8s %-15s %-22s seq %d key %s %q", clock(at), ev.Kind, ev.Severity, ev.Class, where, ev.Seq, ev.Fingerprint, ev.Headline)})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(a.at - b.at) })
	var b strings.Builder
	for _, x := range rows {
		b.WriteString(x.text)
		b.WriteByte('\n')
	}
	return b.String()
}
