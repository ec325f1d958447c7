package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func get(t *testing.T, c *http.Client, url string) (*http.Response, []byte, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestHandlerServesMetricsAndHealth(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Warmup: 20 * time.Second})
	srv := httptest.NewServer(f.Handler(0))
	defer srv.Close()
	c := srv.Client()

	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodGet, "/metrics/", http.StatusOK},
		{http.MethodGet, "/health", http.StatusOK},
		{http.MethodGet, "/health_generate", http.StatusOK},
		{http.MethodGet, "/v1/models", http.StatusNotFound},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}

	resp, body, err := get(t, c, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q, want %q", ct, ContentType)
	}
	fams := scraped(parseExposition(t, body))
	// The middleware counts the scrapes, including this one, which is in flight.
	if got := fams.v("sglang:http_requests_total", "endpoint", "/metrics"); got != 3 {
		t.Errorf("http_requests_total{/metrics} = %v, want 3 (two GETs before, this one)", got)
	}
	if got := fams.v("sglang:http_requests_active", "endpoint", "/metrics"); got != 1 {
		t.Errorf("http_requests_active{/metrics} = %v, want 1", got)
	}
	if got := fams.v("sglang:http_responses_total", "endpoint", "/health_generate", "status_code", "200"); got != 1 {
		t.Errorf("http_responses_total{/health_generate,200} = %v, want 1", got)
	}
}

// TestHandlerCrashAndRestart: a dead replica drops connections; a restarted
// one answers /metrics with fresh counters but fails /health_generate while
// Starting, then recovers.
func TestHandlerCrashAndRestart(t *testing.T) {
	sc, err := IncidentScenario(ClassCrash)
	if err != nil {
		t.Fatal(err)
	}
	f := NewFleet(FleetConfig{Seed: 4, Start: t0, Scenario: sc, Warmup: 10 * time.Second})
	srv := httptest.NewServer(f.Handler(0))
	defer srv.Close()
	c := srv.Client()

	f.Advance(t0.Add(IncidentBaseline - time.Second))
	if _, _, err := get(t, c, srv.URL+"/metrics"); err != nil {
		t.Fatalf("healthy replica: %v", err)
	}

	f.Advance(t0.Add(IncidentBaseline + 10*time.Second))
	for _, path := range []string{"/metrics", "/health_generate"} {
		if resp, _, err := get(t, c, srv.URL+path); err == nil {
			t.Errorf("GET %s on a dead replica: status %d, want a connection failure", path, resp.StatusCode)
		}
	}

	f.Advance(t0.Add(IncidentBaseline + 91*time.Second)) // restarted, still Starting
	resp, body, err := get(t, c, srv.URL+"/metrics")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("restarted replica /metrics: %v", err)
	}
	fams := scraped(parseExposition(t, body))
	if got := fams.v("sglang:num_requests_total") + fams.v("sglang:http_requests_total", "endpoint", chat); got != 0 {
		t.Errorf("counters after restart sum to %v, want 0", got)
	}
	if resp, _, _ := get(t, c, srv.URL+"/health_generate"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health_generate while Starting: %d, want 503", resp.StatusCode)
	}

	f.Advance(t0.Add(IncidentBaseline + 100*time.Second))
	if resp, _, _ := get(t, c, srv.URL+"/health_generate"); resp.StatusCode != http.StatusOK {
		t.Errorf("/health_generate once up: %d, want 200", resp.StatusCode)
	}
}

// TestConcurrentAdvanceAndScrape is for the race detector: one goroutine
// advances while others scrape every replica.
func TestConcurrentAdvanceAndScrape(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 1, Start: t0, Scenario: DemoScenario(0.2)})
	var servers []*httptest.Server
	for i := range f.Replicas() {
		servers = append(servers, httptest.NewServer(f.Handler(i)))
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		for k := 1; k <= 600; k++ {
			f.Advance(t0.Add(time.Duration(k) * 100 * time.Millisecond))
			_ = f.Phase(t0.Add(time.Duration(k) * 100 * time.Millisecond))
		}
	})
	for _, s := range servers {
		wg.Go(func() {
			for range 20 {
				if resp, err := s.Client().Get(s.URL + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
}
