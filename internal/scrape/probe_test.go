package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestHealthURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://h:30000/metrics", "http://h:30000/health_generate"},
		{"http://h:30000/metrics/", "http://h:30000/health_generate"},
		{"https://gw.example/replica-3/metrics", "https://gw.example/replica-3/health_generate"},
		{"http://h:30000/custom/path", "http://h:30000/health_generate"},
		{"http://u:p@h:30000/metrics?token=abc", "http://u:p@h:30000/health_generate?token=abc"},
		{"http://h:30000", "http://h:30000/health_generate"},
	} {
		got, err := HealthURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("HealthURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := HealthURL("http://h:30000/%zz"); err == nil {
		t.Error("unparseable URL accepted")
	}
}

// healthServer answers /health_generate with status, or hangs until the
// client gives up when status is 0; it records the paths it saw.
func healthServer(t *testing.T, status int) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if status == 0 {
			<-r.Context().Done() // a stuck engine: no answer at all
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("status text"))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

func TestProbeHealth(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int // 0: hang
		timeout   time.Duration
		up        bool
		reason    series.ScrapeFailure
		supported bool
	}{
		{"ok", http.StatusOK, time.Second, true, "", true},
		{"unavailable", http.StatusServiceUnavailable, time.Second, false, series.FailureHTTPStatus, true},
		{"hang", 0, 200 * time.Millisecond, false, series.FailureTimeout, true},
		{"no endpoint", http.StatusNotFound, time.Second, false, series.FailureHTTPStatus, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, paths := healthServer(t, tc.status)
			p := ProbeHealth(t.Context(), client(t), Target{Name: "e", URL: srv.URL + "/metrics", Kind: KindEngine}, tc.timeout)
			if p.Up != tc.up || p.Reason != tc.reason || p.Supported() != tc.supported {
				t.Fatalf("probe = %+v; want up=%v reason=%q supported=%v", p, tc.up, tc.reason, tc.supported)
			}
			if got := paths(); len(got) != 1 || got[0] != "/health_generate" {
				t.Errorf("server saw %v, want one GET /health_generate", got)
			}
			if tc.status == 0 && (p.Duration < tc.timeout || p.Status != 0) {
				t.Errorf("hung probe: duration %v, status %d; want >= %v and no status", p.Duration, p.Status, tc.timeout)
			}
			smp := p.Samples()
			if !tc.supported {
				if smp != nil {
					t.Errorf("unsupported endpoint produced samples %v", smp)
				}
				return
			}
			want := map[string]float64{HealthGenerateUp: 0, HealthGenerateDuration: p.Duration.Seconds()}
			if tc.up {
				want[HealthGenerateUp] = 1
			}
			if len(smp) != 2 {
				t.Fatalf("samples %v, want up and duration", smp)
			}
			for _, s := range smp {
				if v, ok := want[s.Name]; !ok || v != s.Value || len(s.Labels) != 0 {
					t.Errorf("sample %s = %v, want %v", s.Key(), s.Value, v)
				}
			}
		})
	}
}

func TestProbeHealthRefusedHidesCredentials(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there any more
	p := ProbeHealth(t.Context(), client(t), Target{Name: "e", URL: "http://admin:hunter2@" + addr + "/metrics?token=s3cret", Kind: KindEngine}, time.Second)
	if p.Up || p.Reason != series.FailureRefused || !p.Supported() {
		t.Fatalf("probe = %+v, want refused", p)
	}
	for _, secret := range []string{"hunter2", "s3cret", "admin"} {
		if strings.Contains(p.Error, secret) {
			t.Errorf("error %q leaks %q", p.Error, secret)
		}
	}
}

func TestAddHealthSamples(t *testing.T) {
	up := HealthProbe{Up: true, Status: http.StatusOK, Duration: 40 * time.Millisecond}
	own := series.Sample{Name: series.NumRunningReqs, Value: 3}

	sc := series.Scrape{Target: "e", Groups: []series.Group{{Worker: "", Samples: []series.Sample{own}}}}
	if !AddHealthSamples(&sc, up) {
		t.Fatal("not added to the target's own group")
	}
	if g := sc.Groups[0]; len(g.Samples) != 3 || g.Samples[1].Name != HealthGenerateUp || g.Samples[2].Value != 0.04 {
		t.Errorf("group samples %v", g.Samples)
	}

	empty := series.Scrape{Target: "e"}
	if !AddHealthSamples(&empty, up) || len(empty.Groups) != 1 || len(empty.Groups[0].Samples) != 2 {
		t.Errorf("empty scrape: %+v", empty.Groups)
	}

	for name, sc := range map[string]series.Scrape{
		"workers only": {Target: "gw", Groups: []series.Group{{Worker: "10.0.0.1:30000", Samples: []series.Sample{own}}}},
		"failed":       {Target: "e", Reason: series.FailureTimeout},
	} {
		if AddHealthSamples(&sc, up) {
			t.Errorf("%s: samples added", name)
		}
	}
	sc = series.Scrape{Target: "e"}
	if AddHealthSamples(&sc, HealthProbe{Status: http.StatusNotFound, Reason: series.FailureHTTPStatus}) {
		t.Error("unsupported probe added samples")
	}
}

func TestHealthProbeOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.HealthProbeInterval != 0 || o.HealthProbeTimeout != 0 {
		t.Errorf("default: probe %v/%v, %v; want off", o.HealthProbeInterval, o.HealthProbeTimeout, err)
	}
	o, err = Options{HealthProbeInterval: DefaultHealthProbeInterval}.withDefaults()
	if err != nil || o.HealthProbeTimeout != DefaultHealthProbeTimeout {
		t.Errorf("30s interval: timeout %v, %v; want %v", o.HealthProbeTimeout, err, DefaultHealthProbeTimeout)
	}
	o, err = Options{HealthProbeInterval: 10 * time.Second}.withDefaults()
	if err != nil || o.HealthProbeTimeout != 9*time.Second {
		t.Errorf("10s interval: timeout %v, %v; want 9s", o.HealthProbeTimeout, err)
	}
	for _, bad := range []Options{
		{HealthProbeInterval: -time.Second},
		{HealthProbeInterval: 10 * time.Second, HealthProbeTimeout: 10 * time.Second},
		{HealthProbeTimeout: -time.Second},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// healthOf returns the probe samples a scrape carries.
func healthOf(sc series.Scrape) (up, dur float64, ok bool) {
	for _, g := range sc.Groups {
		for _, s := range g.Samples {
			switch s.Name {
			case HealthGenerateUp:
				up, ok = s.Value, true
			case HealthGenerateDuration:
				dur = s.Value
			}
		}
	}
	return up, dur, ok
}

// TestLoopHealthProbe: the probe runs on its own schedule, a hung probe
// never delays a scrape, each result rides on exactly one scrape (the next
// one, which is successful here), and gateways are not probed.
func TestLoopHealthProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, probeEvery, probeTimeout = 5 * time.Second, 30 * time.Second, 25 * time.Second
		const engine = "engine-a"
		scrapeOff := startOffset(engine, interval)
		probeOff := startOffset(engine+"/health_generate", probeEvery)
		if (probeOff-scrapeOff)%interval == 0 {
			t.Fatal("probe and scrape fall on the same instant; pick another target name")
		}
		rec := newRecorder(t)
		targets := append(engines(engine), Target{Name: "gw", URL: "http://gw:30000/metrics", Kind: KindGateway})
		m, err := New(targets, Options{Interval: interval, HealthProbeInterval: probeEvery, HealthProbeTimeout: probeTimeout},
			rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		var mu sync.Mutex
		calls := map[string]int{}
		m.probe = func(ctx context.Context, tg Target) HealthProbe {
			mu.Lock()
			calls[tg.Name]++
			n := calls[tg.Name]
			mu.Unlock()
			start := time.Now()
			if n == 2 { // the engine hangs during its second probe
				<-ctx.Done()
				return HealthProbe{At: start, Duration: time.Since(start), Reason: series.FailureTimeout, Error: "context deadline exceeded"}
			}
			return HealthProbe{At: start, Up: true, Status: http.StatusOK}
		}
		start := time.Now()
		stop := startManager(t, m)

		// Probes complete at probeOff (up), probeOff+55s (timed out after
		// 25 s) and probeOff+60s (up).
		type mark struct {
			at  time.Duration
			up  float64
			dur float64
		}
		var marks []mark
		others := map[string][]series.Scrape{}
		for k := 0; ; k++ {
			sc := next(t, rec, engine, others)
			at := sc.At.Sub(start)
			if want := scrapeOff + time.Duration(k)*interval; at != want {
				t.Errorf("scrape %d at %v, want %v: the probe must not delay scrapes", k, at, want)
			}
			if up, dur, ok := healthOf(sc); ok {
				marks = append(marks, mark{at, up, dur})
			}
			if at > probeOff+70*time.Second {
				break
			}
		}
		stop()

		firstAfter := func(d time.Duration) time.Duration {
			k := (d - scrapeOff + interval - 1) / interval
			return scrapeOff + k*interval
		}
		want := []mark{
			{firstAfter(probeOff), 1, 0},
			{firstAfter(probeOff + 55*time.Second), 0, probeTimeout.Seconds()},
			{firstAfter(probeOff + 60*time.Second), 1, 0},
		}
		if len(marks) != len(want) {
			t.Fatalf("scrapes carrying a probe result: %+v, want %+v", marks, want)
		}
		for i := range want {
			if marks[i] != want[i] {
				t.Errorf("probe result %d: %+v, want %+v", i, marks[i], want[i])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if calls["gw"] != 0 {
			t.Errorf("gateway probed %d times, want never", calls["gw"])
		}
		for _, sc := range others["gw"] {
			if _, _, ok := healthOf(sc); ok {
				t.Error("gateway scrape carries probe samples")
			}
		}
	})
}

// While /metrics fails, each probe result rides on the next failed scrape
// as ProbeUp: the window can tell a server that still generates tokens
// from one that is gone.
func TestLoopHealthProbeOnFailedScrapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, probeEvery = 5 * time.Second, 10 * time.Second
		const engine = "dead-a" // its /metrics never answers (fakeFetch)
		rec := newRecorder(t)
		m, err := New(engines(engine), Options{Interval: interval, Timeout: 2 * time.Second, HealthProbeInterval: probeEvery, HealthProbeTimeout: time.Second},
			rec, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = fakeFetch(currentFull(t))
		m.probe = func(ctx context.Context, tg Target) HealthProbe {
			return HealthProbe{At: time.Now(), Up: true, Status: http.StatusOK}
		}
		stop := startManager(t, m)
		probed := 0
		for range 8 {
			sc := next(t, rec, engine, map[string][]series.Scrape{})
			if sc.Reason == "" {
				t.Fatalf("a scrape of %s succeeded", engine)
			}
			if _, _, ok := healthOf(sc); ok {
				t.Errorf("a failed scrape carries probe samples")
			}
			if sc.ProbeUp != nil {
				if !*sc.ProbeUp {
					t.Errorf("probe answered 200, ProbeUp false")
				}
				probed++
			}
		}
		stop()
		if probed < 2 {
			t.Errorf("%d failed scrapes carried a probe result in 40 s of probes every %s", probed, probeEvery)
		}
	})
}
