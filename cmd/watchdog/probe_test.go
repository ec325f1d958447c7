package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// idleEngine serves the exposition of an idle engine that has served
// before (counters flat, nothing running or queued). Its /health_generate
// answers 200, or, when hung, never answers: the scheduler is stuck and
// nobody is calling it, so no request reveals it.
func idleEngine(hung bool) http.Handler {
	const model = `{model_name="m"}`
	expo := strings.Join([]string{
		"# TYPE sglang:num_running_reqs gauge", `sglang:num_running_reqs{tp_rank="0"} 0`,
		"# TYPE sglang:num_queue_reqs gauge", `sglang:num_queue_reqs{tp_rank="0"} 0`,
		"# TYPE sglang:token_usage gauge", `sglang:token_usage{tp_rank="0"} 0.1`,
		"# TYPE sglang:num_requests_total counter", "sglang:num_requests_total" + model + " 5000",
		"# TYPE sglang:generation_tokens_total counter", "sglang:generation_tokens_total" + model + " 900000",
		"# TYPE sglang:prompt_tokens_total counter", "sglang:prompt_tokens_total" + model + " 4000000",
		"",
	}, "\n")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			io.WriteString(w, expo)
		case "/health_generate":
			if hung {
				<-r.Context().Done() // answers only when the prober gives up
				return
			}
			io.WriteString(w, "ok")
		default:
			http.NotFound(w, r)
		}
	})
}

// notification is the structured log line the daemon writes per event.
type notification struct {
	Msg, Kind, Class, Replica, Severity, Summary string
}

func notifications(logs *lines) []notification {
	var out []notification
	for _, s := range strings.Split(logs.text(), "\n") {
		var n notification
		if json.Unmarshal([]byte(s), &n) == nil && n.Msg == "notification" {
			out = append(out, n)
		}
	}
	return out
}

// TestDaemonProbeSeesAHangWithNothingInFlight: with the default health
// probe on, an engine whose /health_generate hangs while nothing is in
// flight (every counter flat, as for an idle engine) pages engine_hang; an
// idle engine whose probe answers does not.
func TestDaemonProbeSeesAHangWithNothingInFlight(t *testing.T) {
	hung := httptest.NewServer(idleEngine(true))
	t.Cleanup(hung.Close)
	idle := httptest.NewServer(idleEngine(false))
	t.Cleanup(idle.Close)

	// Only the timings are scaled down; the probe is on by default.
	cfg := `
scrape:
  interval: 100ms
  health_probe: {interval: 300ms, timeout: 200ms}
evaluation: {interval: 100ms}
detectors:
  engine_hang: {range: 2s, fallback_range: 2s, min_probes: 2}
alerts: {for: 300ms, keep_firing_for: 1s, resolved_retention: 1m, restore_grace: 2s}
`
	env := map[string]string{"WATCHDOG_CONFIG": writeConfig(t, cfg), "WATCHDOG_TARGETS": fmt.Sprintf("hung=%s,idle=%s", hung.URL, idle.URL)}
	_, logs := runDaemon(t, env)

	logs.waitFor(t, "engine_hang page for the hung engine", func(s string) bool {
		var n notification
		return json.Unmarshal([]byte(s), &n) == nil && n.Msg == "notification" && n.Kind == "trigger" &&
			n.Class == "engine_hang" && n.Replica == "hung"
	})
	for _, n := range notifications(logs) {
		if n.Replica == "idle" {
			t.Errorf("the idle engine whose probe answers paged: %+v", n)
		}
	}
}
