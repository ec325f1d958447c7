package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// fakePrometheus scrapes fake engines on the bubble's clock, keeps every
// sample with its time, and answers the HTTP API's query_range (each
// series' newest sample at or before each step, within Prometheus' 5
// minute look-back) and instant range-selector queries (the raw samples of
// the range), labelling series with job and instance = the engine's name.
// It reads the query only for a range selector's length, an instance
// matcher and the replica listing (count by instance): the watchdog asks
// for the SGLang families and up, which is all this Prometheus holds. It
// also answers the SLO backfill's sums of bucket increases by model
// (increasesByModelAndLE, slo_test.go).
type fakePrometheus struct {
	mu      sync.Mutex
	series  map[string]*promSeries // by name and labels
	queries []string
	// failing are the engines whose scrapes fail: Prometheus records up 0
	// and nothing else for them.
	failing map[string]bool
}

type promSeries struct {
	metric map[string]string
	ts     []time.Time
	vs     []float64
}

func newFakePrometheus() *fakePrometheus {
	return &fakePrometheus{series: map[string]*promSeries{}, failing: map[string]bool{}}
}

// scrapeEvery scrapes the engines every interval until stop is closed.
func (p *fakePrometheus) scrapeEvery(interval time.Duration, engines map[string]*fakeEngine, stop <-chan struct{}) {
	parser := scrape.NewParser()
	for {
		now := time.Now()
		for name, e := range engines {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			raw, err := parser.Parse(nil, rec.Body.Bytes())
			if err != nil {
				panic(err)
			}
			p.mu.Lock()
			if p.failing[name] {
				p.add(map[string]string{"__name__": "up", "job": "sglang", "instance": name}, now, 0)
				p.mu.Unlock()
				continue
			}
			p.add(map[string]string{"__name__": "up", "job": "sglang", "instance": name}, now, 1)
			for _, s := range raw {
				m := map[string]string{"__name__": s.Name, "job": "sglang", "instance": name}
				for _, l := range s.Labels {
					m[l.Name] = l.Value
				}
				p.add(m, now, s.Value)
			}
			p.mu.Unlock()
		}
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
	}
}

// asked returns the queries received so far.
func (p *fakePrometheus) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.queries)
}

func (p *fakePrometheus) add(m map[string]string, at time.Time, v float64) {
	b, _ := json.Marshal(m) // map keys marshal sorted: a stable key
	s := p.series[string(b)]
	if s == nil {
		s = &promSeries{metric: m}
		p.series[string(b)] = s
	}
	s.ts, s.vs = append(s.ts, at), append(s.vs, v)
}

func (p *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	p.mu.Lock()
	defer p.mu.Unlock()
	q := r.Form.Get("query")
	p.queries = append(p.queries, r.URL.Path+" "+q)
	secs := func(key string) time.Time {
		f, _ := strconv.ParseFloat(r.Form.Get(key), 64)
		return time.UnixMilli(int64(f * 1000))
	}
	type row struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var rows []row
	keys := make([]string, 0, len(p.series))
	for k := range p.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pt := func(at time.Time, v float64) [2]any {
		return [2]any{float64(at.UnixMilli()) / 1000, strconv.FormatFloat(v, 'g', -1, 64)}
	}
	switch r.URL.Path {
	case "/api/v1/query_range":
		start, end := secs("start"), secs("end")
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		if sums, ok := p.increasesByModelAndLE(q, start, end, time.Duration(step*float64(time.Second))); ok {
			json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": sums}})
			return
		}
		match := regexp.MustCompile(".*")
		if _, m, ok := strings.Cut(q, `instance=~`); ok {
			quoted, _ := strconv.QuotedPrefix(m)
			re, _ := strconv.Unquote(quoted)
			match = regexp.MustCompile("^(?:" + re + ")$")
		}
		for _, k := range keys {
			s := p.series[k]
			if !match.MatchString(s.metric["instance"]) {
				continue
			}
			var vals [][2]any
			for at := start; !at.After(end); at = at.Add(time.Duration(step * float64(time.Second))) {
				i := sort.Search(len(s.ts), func(i int) bool { return s.ts[i].After(at) }) - 1
				if i >= 0 && at.Sub(s.ts[i]) <= 5*time.Minute {
					vals = append(vals, pt(at, s.vs[i]))
				}
			}
			if len(vals) > 0 {
				rows = append(rows, row{s.metric, vals})
			}
		}
	case "/api/v1/query":
		at := secs("time")
		if strings.HasPrefix(q, "count by (instance) (") { // the replicas, before a range
			var vector []map[string]any
			seen := map[string]bool{}
			for _, k := range keys {
				if inst := p.series[k].metric["instance"]; !seen[inst] {
					seen[inst] = true
					vector = append(vector, map[string]any{"metric": map[string]string{"instance": inst}, "value": pt(at, 1)})
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": vector}})
			return
		}
		open := strings.LastIndex(q, "[")
		d, err := time.ParseDuration(strings.TrimSuffix(q[open+1:], "]"))
		if open < 0 || err != nil {
			http.Error(w, `{"status":"error","errorType":"bad_data","error":"fake: not a range selector"}`, http.StatusBadRequest)
			return
		}
		for _, k := range keys {
			s := p.series[k]
			var vals [][2]any
			for i, t := range s.ts {
				if t.After(at.Add(-d)) && !t.After(at) {
					vals = append(vals, pt(t, s.vs[i]))
				}
			}
			if len(vals) > 0 {
				rows = append(rows, row{s.metric, vals})
			}
		}
	default:
		http.NotFound(w, r)
		return
	}
	if rows == nil {
		rows = []row{}
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": rows}})
}

// scrapingEvery5s is a fake Prometheus scraping engines every 5 s until
// the returned stop, which waits for its last scrape.
func scrapingEvery5s(engines map[string]*fakeEngine) (*fakePrometheus, func()) {
	prom := newFakePrometheus()
	stop, scraped := make(chan struct{}), make(chan struct{})
	go func() { prom.scrapeEvery(5*time.Second, engines, stop); close(scraped) }()
	return prom, func() { close(stop); <-scraped }
}

// serveOn serves the fake on the bubble's network and points history at it.
func (p *fakePrometheus) serveOn(t *testing.T, network *memnet.Network, cfg *config.Config) {
	ln, err := network.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cfg.History.URL = "http://" + ln.Addr().String()
}

// historyRestartConfig: 5 s rounds; a cache collapse is judged over 30 s
// against a 10-minute baseline, of which the default half must be covered
// (5 minutes) before a ratio to it counts.
const historyRestartConfig = `
log_level: info
scrape: {interval: 5s, health_probe: {enabled: false}}
evaluation: {interval: 5s}
detectors:
  cache_collapse: {range: 30s, baseline: 10m, min_prompt_tokens: 5000, restart_grace: 1m}
alerts: {for: 10s}
`

// TestRestartWithHistoryPagesACollapseTwoMinutesIn: Prometheus has
// scraped a healthy replica for 15 minutes when the watchdog (re)starts;
// two minutes later the replica's prefix cache collapses. With history:
// the windows were filled from Prometheus at start, the baseline is there
// and the collapse pages; without it the watchdog has two minutes of
// baseline, too little to judge, and stays silent.
func TestRestartWithHistoryPagesACollapseTwoMinutesIn(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	for _, withHistory := range []bool{true, false} {
		t.Run(fmt.Sprintf("history=%v", withHistory), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				engines := map[string]*fakeEngine{"r": newFakeEngine("org/model", healthyLoad())}
				prom, stopScraping := scrapingEvery5s(engines)
				time.Sleep(15 * time.Minute) // Prometheus' history before the restart

				var setup func(*memnet.Network, *config.Config)
				if withHistory {
					setup = func(n *memnet.Network, cfg *config.Config) { prom.serveOn(t, n, cfg) }
				}
				run := startDaemonWith(t, historyRestartConfig, engines, setup)
				s := &script{start: run.start, marks: map[time.Duration]string{}}
				s.at(2*time.Minute+2500*time.Millisecond, "r's prefix cache collapses", func() { engines["r"].set(withHitRate(0.05)) })
				s.at(4*time.Minute, "run stopped", nil)
				if err := run.stop(); err != nil {
					t.Fatalf("daemon: %v", err)
				}
				stopScraping()

				var paged bool
				for _, ev := range run.events() {
					if ev.Class == "cache_collapse" && ev.Replica == "r" && ev.Kind == "trigger" {
						paged = true
					}
				}
				if paged != withHistory {
					t.Errorf("cache_collapse paged: %v, want %v\ntimeline:\n%s\nlog:\n%s", paged, withHistory, run.timeline(s.marks), run.stderr.String())
				}
				if withHistory {
					log := run.stderr.String()
					if !strings.Contains(log, `"history backfilled"`) {
						t.Errorf("no backfill logged:\n%s", log)
					}
					if q := prom.asked(); len(q) < 2 || !strings.HasPrefix(q[0], "/api/v1/query count by (instance)") || !strings.HasPrefix(q[1], "/api/v1/query_range ") {
						t.Errorf("Prometheus was asked %v; want the replicas listed, then ranges", q)
					}
				}
			})
		})
	}
}

// TestSourcePrometheusPagesLive: with source: prometheus the daemon
// scrapes nothing; it finds the replicas in Prometheus and pages from
// what Prometheus scraped: a prefix-cache collapse on r1 and, when
// Prometheus can no longer scrape r2 (up 0), r2 down, saying why.
func TestSourcePrometheusPagesLive(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engines := map[string]*fakeEngine{"r1": newFakeEngine("org/model", healthyLoad()), "r2": newFakeEngine("org/model", healthyLoad())}
		prom, stopScraping := scrapingEvery5s(engines)
		time.Sleep(15 * time.Minute)

		run := startDaemonWith(t, historyRestartConfig+"source: prometheus\n", nil, func(n *memnet.Network, cfg *config.Config) {
			prom.serveOn(t, n, cfg)
		})
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		s.at(2*time.Minute+2500*time.Millisecond, "r1's prefix cache collapses; Prometheus fails to scrape r2", func() {
			engines["r1"].set(withHitRate(0.05))
			prom.mu.Lock()
			prom.failing["r2"] = true
			prom.mu.Unlock()
		})
		s.at(4*time.Minute, "run stopped", nil)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		stopScraping()

		got := map[string]string{}
		for _, ev := range run.events() {
			if ev.Kind == "trigger" {
				got[ev.Replica+" "+string(ev.Class)] = ev.Headline + " " + ev.Summary
			}
		}
		if _, ok := got["r1 cache_collapse"]; !ok {
			t.Errorf("no cache_collapse page for r1")
		}
		if down, ok := got["r2 replica_down"]; !ok || !strings.Contains(down, "absent") {
			t.Errorf("r2 down: paged %v, says %q; want a page saying absent", ok, down)
		}
		if len(got) != 2 {
			t.Errorf("pages %v, want r1 cache_collapse and r2 replica_down", got)
		}
		for _, q := range prom.asked() {
			if !strings.Contains(q, "sglang") {
				t.Errorf("query %q does not select the SGLang families", q)
			}
		}
		if t.Failed() {
			t.Logf("timeline:\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
		}
	})
}

// TestSourcePrometheusReadsEveryStepBetweenRounds: with source:
// prometheus a poll appends the newest sample Prometheus holds of each
// replica, so the daemon polls every history.step (the scrape interval),
// not every evaluation round: with the default 15 s rounds and Prometheus
// scraping every 5 s, polling once a round would keep one sample in three.
func TestSourcePrometheusReadsEveryStepBetweenRounds(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engines := map[string]*fakeEngine{"r": newFakeEngine("org/model", healthyLoad())}
		prom, stopScraping := scrapingEvery5s(engines)
		time.Sleep(time.Minute)
		run := startDaemonWith(t, "scrape: {interval: 5s, health_probe: {enabled: false}}\nsource: prometheus\n", nil, func(n *memnet.Network, cfg *config.Config) {
			if cfg.Evaluation.Interval != 15*time.Second {
				t.Errorf("default evaluation interval %s, want 15s", cfg.Evaluation.Interval)
			}
			prom.serveOn(t, n, cfg)
		})
		time.Sleep(2 * time.Minute)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		stopScraping()
		polls := 0
		for _, q := range prom.asked() {
			if strings.HasPrefix(q, "/api/v1/query ") && strings.HasSuffix(q, "[10000ms]") {
				polls++
			}
		}
		// A poll at start and one every 5 s over two minutes: 25 (8 or 9
		// at one a round).
		if polls < 24 || polls > 26 {
			t.Errorf("%d polls of the newest samples in 2 minutes, want one every 5 s (25); asked:\n%s", polls, strings.Join(prom.asked(), "\n"))
		}
	})
}

// TestHistoryDownTheDaemonStartsAnyway: a Prometheus that answers 503
// (or not at all, past history.startup_budget) costs the backfill, never
// the start: the daemon says what it could not fill and watches its
// targets from live scrapes.
func TestHistoryDownTheDaemonStartsAnyway(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	for _, name := range []string{"503", "hang"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{}) // ends the hanging answers
				handler := func(w http.ResponseWriter, r *http.Request) {
					if name == "503" {
						http.Error(w, "unavailable", http.StatusServiceUnavailable)
						return
					}
					select {
					case <-r.Context().Done():
					case <-release:
					}
				}
				engines := map[string]*fakeEngine{"r": newFakeEngine("org/model", healthyLoad())}
				run := startDaemonWith(t, historyRestartConfig+"history: {startup_budget: 20s, timeout: 1m}\n", engines, func(n *memnet.Network, cfg *config.Config) {
					ln, err := n.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					srv := &http.Server{Handler: http.HandlerFunc(handler)}
					go srv.Serve(ln)
					t.Cleanup(func() { srv.Close() })
					cfg.History.URL = "http://" + ln.Addr().String()
				})
				if waited := time.Since(run.start); waited > 20*time.Second {
					t.Errorf("start-up took %s, past the 20s budget", waited)
				}
				if name == "hang" {
					// Serving first: while the backfill waits for
					// Prometheus, the probes are answered — alive, not
					// ready until the first round after the backfill.
					time.Sleep(5 * time.Second)
					if code, body := run.apiCall(t, http.MethodGet, "/-/healthy", nil); code != http.StatusOK {
						t.Errorf("during the backfill /-/healthy = %d %s, want 200", code, body)
					}
					if code, body := run.apiCall(t, http.MethodGet, "/-/ready", nil); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "first evaluation round") {
						t.Errorf("during the backfill /-/ready = %d %s, want 503 waiting for the first evaluation round", code, body)
					}
				}
				time.Sleep(30 * time.Second)
				if code, body := run.apiCall(t, http.MethodGet, "/-/ready", nil); code != http.StatusOK {
					t.Errorf("after the backfill's budget /-/ready = %d %s, want 200", code, body)
				}
				if _, ok := run.findings(t)["r"]; !ok {
					t.Errorf("the daemon does not watch r after a failed backfill")
				}
				close(release)
				if err := run.stop(); err != nil {
					t.Fatalf("daemon: %v", err)
				}
				if log := run.stderr.String(); !strings.Contains(log, "history backfill incomplete") {
					t.Errorf("the failed backfill is not logged:\n%s", log)
				}
			})
		})
	}
}
