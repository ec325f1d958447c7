package sim

import (
	"bytes"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func loopbackGet(t *testing.T, srv *httptest.Server, i int, userAgent string) scraped {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+MetricsPath(i), nil)
	req.Header.Set("User-Agent", userAgent)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("replica %d: %v", i, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ContentType {
		t.Fatalf("replica %d: status %d, Content-Type %q", i, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return scraped(parseExposition(t, body.Bytes()))
}

func TestLoopbackServesEveryReplicaWithMovingNumbers(t *testing.T) {
	clock := &fakeClock{now: t0}
	l, err := NewLoopback(LoopbackConfig{Replicas: 20, Seed: 1, Now: clock.Now, UserAgents: []string{"Prometheus/", "sglang-watchdog/"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()

	// The same families as a simulated replica renders itself.
	var direct bytes.Buffer
	if err := NewFleet(FleetConfig{Replicas: 1, Seed: 1, Start: t0, Warmup: time.Minute}).WriteMetrics(&direct, 0); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(maps.Keys(parseExposition(t, direct.Bytes())))

	before := make([]scraped, l.Replicas())
	for i := range before {
		before[i] = loopbackGet(t, srv, i, "Prometheus/2.42.0")
		if got := slices.Sorted(maps.Keys(before[i])); !slices.Equal(got, want) {
			t.Fatalf("replica %d families:\n%v\nwant\n%v", i, got, want)
		}
	}
	if n := l.ReplicasScraped(0); n != 20 {
		t.Errorf("replicas scraped by Prometheus/: %d, want 20", n)
	}
	if n := l.ReplicasScraped(1); n != 0 {
		t.Errorf("replicas scraped by sglang-watchdog/: %d, want 0", n)
	}

	// Replicas 3 and 11 render the same source at different scales.
	if a, b := before[3].v("sglang:num_requests_total"), before[11].v("sglang:num_requests_total"); a == b || a <= 0 || b <= 0 {
		t.Errorf("replicas 3 and 11 serve the same request count %v, %v", a, b)
	}

	clock.advance(30 * time.Second)
	gaugesMoved := false
	for i := range before {
		after := loopbackGet(t, srv, i, "sglang-watchdog/test")
		for _, c := range []string{"sglang:num_requests_total", "sglang:generation_tokens_total", "sglang:e2e_request_latency_seconds"} {
			if after.v(c) <= before[i].v(c) {
				t.Errorf("replica %d: %s did not grow over 30 s: %v -> %v", i, c, before[i].v(c), after.v(c))
			}
		}
		// Counters of things stay whole at every scale, as SGLang's are;
		// the watchdog stores whole values more compactly than fractions.
		for _, c := range []string{"sglang:num_requests_total", "sglang:generation_tokens_total", "sglang:prompt_tokens_total"} {
			if v := after.v(c); v != math.Trunc(v) {
				t.Errorf("replica %d: %s = %v, want a whole number", i, c, v)
			}
		}
		if after.v("sglang:num_used_tokens") != before[i].v("sglang:num_used_tokens") {
			gaugesMoved = true
		}
	}
	if !gaugesMoved {
		t.Error("sglang:num_used_tokens did not change on any replica over 30 s")
	}
	if n := l.ReplicasScraped(1); n != 20 {
		t.Errorf("replicas scraped by sglang-watchdog/: %d, want 20", n)
	}

	for _, path := range []string{"/replicas/20/metrics", "/replicas/-1/metrics", "/replicas/x/metrics", "/metrics"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 404", path, resp.StatusCode)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/replicas/19/health_generate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health_generate: status %d, want 200", resp.StatusCode)
	}
}

func TestLoopbackIncidentHitsOneReplicaInEight(t *testing.T) {
	clock := &fakeClock{now: t0}
	l, err := NewLoopback(LoopbackConfig{Replicas: 16, Seed: 1, Now: clock.Now, Incident: ClassCrash, IncidentAfter: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	loopbackGet(t, srv, 0, "test")
	clock.advance(20 * time.Second)
	for i := range l.Replicas() {
		resp, err := srv.Client().Get(srv.URL + MetricsPath(i))
		if i%8 == 0 {
			if err == nil {
				resp.Body.Close()
				t.Errorf("replica %d: crashed, yet answered %d", i, resp.StatusCode)
			}
			continue
		}
		if err != nil {
			t.Fatalf("replica %d is healthy, yet: %v", i, err)
		}
		resp.Body.Close()
	}
}

func TestLoopbackBounds(t *testing.T) {
	clock := &fakeClock{now: t0}
	for _, n := range []int{0, -1, MaxLoopbackReplicas + 1} {
		if _, err := NewLoopback(LoopbackConfig{Replicas: n, Now: clock.Now}); err == nil {
			t.Errorf("%d replicas: no error", n)
		}
	}
	if _, err := NewLoopback(LoopbackConfig{Replicas: 1, Now: clock.Now, Incident: "meltdown"}); err == nil {
		t.Error("unknown incident class: no error")
	}
}

// BenchmarkLoopbackRender is the fleet's cost per scrape served: 10,000
// replicas at 5 s are 2,000 of these a second.
func BenchmarkLoopbackRender(b *testing.B) {
	clock := &fakeClock{now: t0}
	l, err := NewLoopback(LoopbackConfig{Replicas: 100, Seed: 1, Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	t := l.frame.Load().sources[0]
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = t.render(buf[:0], 1.1)
	}
	b.SetBytes(int64(len(buf)))
}

// Any exposition the template accepts renders back to one it reads the same
// values from at scale 1 (histogram counts rounded, as real ones are whole),
// and at another scale with the text around the values untouched. (Seeds
// are small: the fuzzer minimises every new input, which on a whole
// exposition takes longer than a CI smoke run.)
func FuzzLoopbackTemplate(f *testing.F) {
	f.Add([]byte("# TYPE x_total counter\nx_total 3\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\nh_sum 0.5\n"))
	f.Add([]byte("no_value\n"))
	f.Fuzz(func(t *testing.T, expo []byte) {
		tmpl, err := newTemplate(expo)
		if err != nil {
			return
		}
		again, err := newTemplate(tmpl.render(nil, 1))
		if err != nil {
			t.Fatalf("rendered exposition does not read back: %v", err)
		}
		if len(again.values) != len(tmpl.values) {
			t.Fatalf("%d values read back, want %d", len(again.values), len(tmpl.values))
		}
		for i, v := range tmpl.values {
			if tmpl.scaled[i] == scaledCount {
				v = math.Round(v)
			}
			if w := again.values[i]; w != v && !(v != v && w != w) { // NaN reads back as NaN
				t.Fatalf("value %d: %v read back as %v", i, v, w)
			}
		}
		scaled, err := newTemplate(tmpl.render(nil, 1.5))
		if err != nil || !slices.EqualFunc(scaled.text, tmpl.text, bytes.Equal) {
			t.Fatalf("scaling changed the text around the values (err %v)", err)
		}
	})
}
