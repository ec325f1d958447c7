package main

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// gatewayLoad is what a fake model gateway (smg) is going through: its
// client traffic, its own retries, and what it sees of each worker.
type gatewayLoad struct {
	ClientsPerSecond float64 // client requests arriving
	RetriesPerSecond float64 // upstream attempts sent again
	ErrorsPerSecond  float64 // client requests answered 503 after the last retry
	Workers          map[string]gatewayWorker
}

// gatewayWorker is one worker as the gateway sees it, by its URL.
type gatewayWorker struct {
	Breaker           float64 // smg_worker_cb_state: 0 closed, 1 open, 2 half-open
	Healthy           bool
	SuccessPerSecond  float64
	FailuresPerSecond float64
	Active            float64
}

// fakeGateway serves the gateway's /metrics in smg's current names,
// counters advancing at its load.
type fakeGateway struct {
	mu       sync.Mutex
	load     gatewayLoad
	last     time.Time
	counters map[string]float64
}

func newFakeGateway(load gatewayLoad) *fakeGateway {
	return &fakeGateway{load: load, counters: map[string]float64{}}
}

func (g *fakeGateway) set(change func(*gatewayLoad)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance(time.Now())
	l := g.load
	l.Workers = maps.Clone(l.Workers)
	change(&l)
	g.load = l
}

func (g *fakeGateway) advance(now time.Time) {
	if g.last.IsZero() {
		g.last = now
		return
	}
	dt := now.Sub(g.last).Seconds()
	g.last = now
	l := g.load
	g.counters["arrived"] += l.ClientsPerSecond * dt
	g.counters["ok"] += (l.ClientsPerSecond - l.ErrorsPerSecond) * dt
	g.counters["503"] += l.ErrorsPerSecond * dt
	g.counters["retries"] += l.RetriesPerSecond * dt
	g.counters["exhausted"] += l.ErrorsPerSecond * dt
	var failed float64
	for url, w := range l.Workers {
		g.counters[url+"/success"] += w.SuccessPerSecond * dt
		g.counters[url+"/failure"] += w.FailuresPerSecond * dt
		failed += w.FailuresPerSecond
	}
	attempts := l.ClientsPerSecond + l.RetriesPerSecond
	g.counters["upstream200"] += (attempts - failed) * dt
	g.counters["upstream503"] += failed * dt
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.advance(time.Now())
	var b strings.Builder
	c := g.counters
	fmt.Fprintf(&b, "# TYPE smg_http_requests_total counter\nsmg_http_requests_total{method=\"POST\",path=\"/v1/chat/completions\"} %g\n", c["arrived"])
	fmt.Fprintf(&b, "# TYPE smg_http_responses_total counter\n")
	fmt.Fprintf(&b, "smg_http_responses_total{path=\"/v1/chat/completions\",status_code=\"200\",error_code=\"\"} %g\n", c["ok"])
	fmt.Fprintf(&b, "smg_http_responses_total{path=\"/v1/chat/completions\",status_code=\"503\",error_code=\"service_unavailable\"} %g\n", c["503"])
	fmt.Fprintf(&b, "# TYPE smg_router_upstream_responses_total counter\n")
	fmt.Fprintf(&b, "smg_router_upstream_responses_total{router_type=\"http\",status_code=\"200\",error_code=\"\"} %g\n", c["upstream200"])
	fmt.Fprintf(&b, "smg_router_upstream_responses_total{router_type=\"http\",status_code=\"503\",error_code=\"service_unavailable\"} %g\n", c["upstream503"])
	fmt.Fprintf(&b, "# TYPE smg_worker_retries_total counter\nsmg_worker_retries_total{worker_type=\"regular\",endpoint=\"chat\"} %g\n", c["retries"])
	fmt.Fprintf(&b, "# TYPE smg_worker_retries_exhausted_total counter\nsmg_worker_retries_exhausted_total{worker_type=\"regular\",endpoint=\"chat\"} %g\n", c["exhausted"])
	urls := slices.Sorted(maps.Keys(g.load.Workers))
	fmt.Fprintf(&b, "# TYPE smg_worker_cb_state gauge\n")
	for _, u := range urls {
		fmt.Fprintf(&b, "smg_worker_cb_state{worker=%q} %g\n", u, g.load.Workers[u].Breaker)
	}
	fmt.Fprintf(&b, "# TYPE smg_worker_health gauge\n")
	for _, u := range urls {
		h := 0
		if g.load.Workers[u].Healthy {
			h = 1
		}
		fmt.Fprintf(&b, "smg_worker_health{worker=%q} %d\n", u, h)
	}
	fmt.Fprintf(&b, "# TYPE smg_worker_cb_outcomes_total counter\n")
	for _, u := range urls {
		fmt.Fprintf(&b, "smg_worker_cb_outcomes_total{worker=%q,outcome=\"success\"} %g\n", u, c[u+"/success"])
		fmt.Fprintf(&b, "smg_worker_cb_outcomes_total{worker=%q,outcome=\"failure\"} %g\n", u, c[u+"/failure"])
	}
	fmt.Fprintf(&b, "# TYPE smg_worker_requests_active gauge\n")
	for _, u := range urls {
		fmt.Fprintf(&b, "smg_worker_requests_active{worker=%q} %g\n", u, g.load.Workers[u].Active)
	}
	g.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(w, b.String())
}

// serveGateway serves gw on the network and adds it as the gateway target
// "router"; workers maps engine target names to the gateway's worker
// entries, filled with the URL each engine serves at.
func serveGateway(t *testing.T, network *memnet.Network, cfg *config.Config, gw *fakeGateway, workers map[string]gatewayWorker, extra map[string]gatewayWorker) {
	t.Helper()
	gw.load.Workers = map[string]gatewayWorker{}
	for _, tg := range cfg.Targets {
		if w, ok := workers[tg.Name]; ok {
			gw.load.Workers[strings.TrimSuffix(tg.URL, "/metrics")] = w
		}
	}
	maps.Copy(gw.load.Workers, extra)
	ln, err := network.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cfg.Targets = append(cfg.Targets, config.Target{Name: "router", URL: "http://" + ln.Addr().String() + "/metrics", Kind: "gateway"})
}

// workerURL is the gateway's URL for the engine target name.
func workerURL(gw *fakeGateway, cfg *config.Config, name string) string {
	for _, tg := range cfg.Targets {
		if tg.Name == name {
			return strings.TrimSuffix(tg.URL, "/metrics")
		}
	}
	return ""
}

// A worker slows down behind a gateway that retries: its queue fills, the
// gateway opens its breaker, retries every failed attempt and answers some
// clients 503. That is one incident, named after the worker's cause, with
// the gateway's retries, its 5xx and the worker it took out of rotation on
// the page — not a second critical page for the gateway.
func TestWorkerSlowdownBehindRetryingGatewayPagesOnce(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		a, b := newFakeEngine("org/model", healthyLoad()), newFakeEngine("org/model", healthyLoad())
		gw := newFakeGateway(gatewayLoad{ClientsPerSecond: 20})
		healthy := gatewayWorker{Healthy: true, SuccessPerSecond: 10, Active: 20}
		var cfgSeen *config.Config
		run := startDaemonWith(t, fmt.Sprintf(flipConfig, "5s"), map[string]*fakeEngine{"sgl-a": a, "sgl-b": b},
			func(network *memnet.Network, cfg *config.Config) {
				serveGateway(t, network, cfg, gw, map[string]gatewayWorker{"sgl-a": healthy, "sgl-b": healthy}, nil)
				cfgSeen = cfg
			})
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("timeline (t = since the daemon started):\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
			}
		}()
		urlA := workerURL(gw, cfgSeen, "sgl-a")
		slow := flipWarmup + 500*time.Millisecond
		s.at(slow, "sgl-a decodes 5x slower, its queue fills; the gateway opens its breaker and retries", func() {
			a.set(func(l *engineLoad) { l.ITL, l.Queued, l.TTFT, l.QueueTime = 0.1, 30, 3, 2.5 })
			gw.set(func(l *gatewayLoad) {
				l.RetriesPerSecond, l.ErrorsPerSecond = 25, 3
				l.Workers[urlA] = gatewayWorker{Breaker: 1, Healthy: true, SuccessPerSecond: 2, FailuresPerSecond: 20, Active: 60}
			})
		})
		s.at(slow+90*time.Second, "", nil)
		if err := run.stop(); err != nil {
			t.Fatal(err)
		}

		var triggers []notify.Event
		for _, ev := range run.events() {
			if ev.Kind == notify.KindTrigger {
				triggers = append(triggers, ev)
			}
		}
		if len(triggers) == 0 {
			t.Fatal("nothing paged")
		}
		first := triggers[0]
		for _, ev := range triggers {
			if ev.Fingerprint != first.Fingerprint {
				t.Errorf("a second incident paged: %s on %s (%s); the first is %s on %s", ev.Class, ev.Replica, ev.Headline, first.Class, first.Replica)
			}
		}
		last := triggers[len(triggers)-1]
		if last.Replica != "sgl-a" || last.Class != string(detect.DecodeSlowdown) {
			t.Errorf("the incident is %s on %s, want decode_slowdown on sgl-a (the worker's cause)", last.Class, last.Replica)
		}
		if last.Severity != detect.Critical {
			t.Errorf("severity %s, want critical: users get 503s and the gateway multiplies the load", last.Severity)
		}
		if !slices.Contains(last.Explains, string(detect.RetryAvalanche)) {
			t.Errorf("explains %v, want the gateway's retry avalanche among them", last.Explains)
		}
		var lines []string
		for _, e := range last.Evidence {
			lines = append(lines, e.Name)
		}
		all := strings.Join(lines, "\n")
		for _, want := range []string{`router: router retries/s`, `router: (shed requests/s|server errors/s)`} {
			if !regexp.MustCompile(want).MatchString(all) {
				t.Errorf("the page's evidence lacks the gateway's %q:\n%s", want, all)
			}
		}
		t.Logf("diagnosis: %s\nevidence:\n%s\nemergency: %q", last.Diagnosis, all, last.Emergency)
		if !strings.Contains(last.Diagnosis, "took it out of rotation") {
			t.Errorf("the diagnosis does not say the gateway took sgl-a out of rotation:\n%s", last.Diagnosis)
		}
	})
}
