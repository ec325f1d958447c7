package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A daemon waiting for a usable configuration is alive, not ready, and
// says why on every path but liveness and /metrics.
func TestWaitingServerSaysWhyItIsNotReady(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "watchdog_config_last_reload_successful", Help: "h"}))
	const problem = "watchdog.yaml: alerts.for: must be positive"
	loads := 0
	srv, err := NewWaiting("127.0.0.1:0", WaitingOptions{Gatherer: reg, Problem: func() string { return problem },
		Reload: func() error {
			loads++
			if loads == 1 {
				return errors.New("still " + problem)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + srv.Addr()
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/-/healthy", 200, "waiting for a usable configuration"},
		{"/healthz", 200, "ok"},
		{"/-/ready", 503, problem},
		{"/readyz", 503, problem},
		{"/", 503, "not evaluating: the configuration cannot be used\n\n" + problem},
		{"/incidents/abc-1", 503, problem},
		{"/api/v1/targets", 503, problem},
		{"/metrics", 200, "watchdog_config_last_reload_successful 0"},
	} {
		if code, body := get(t, base+tc.path); code != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %q, want %d with %q", tc.path, code, body, tc.status, tc.want)
		}
	}
	post := func() (int, string) {
		resp, err := http.Post(base+"/-/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(); code != 400 || !strings.Contains(body, "still") {
		t.Errorf("POST /-/reload of a configuration still broken: %d %q", code, body)
	}
	if code, body := post(); code != 200 || !strings.Contains(body, "loaded") {
		t.Errorf("POST /-/reload of a fixed configuration: %d %q", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Without the lifecycle API, as the daemon's own server.
	rec := httptest.NewRecorder()
	waitingHandler(WaitingOptions{Gatherer: reg, Problem: func() string { return problem }}).
		ServeHTTP(rec, httptest.NewRequest("POST", "/-/reload", nil))
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--web.enable-lifecycle") {
		t.Errorf("POST /-/reload without a reload: %d %q", rec.Code, rec.Body.String())
	}
}
