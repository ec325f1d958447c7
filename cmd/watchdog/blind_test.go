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

// brokenMetrics is a healthy server whose /metrics is broken in one way;
// /health_generate answers at once.
func brokenMetrics(kind string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health_generate" {
			io.WriteString(w, "ok")
			return
		}
		switch kind {
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<!DOCTYPE html><html><body>Sign in</body></html>")
		case "500":
			http.Error(w, "collector failed", http.StatusInternalServerError)
		case "truncated":
			w.Header().Set("Content-Length", "4096")
			io.WriteString(w, "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3\nsglang:token_usa")
		}
	})
}

// TestDaemonBrokenMetricsOnAHealthyServerIsNotAnOutage: an HTML login
// page, a persistent 500 or a truncated exposition on /metrics of a server
// that serves fine pages a metrics_blind warning carrying what /metrics
// answered, never a critical replica_down.
func TestDaemonBrokenMetricsOnAHealthyServerIsNotAnOutage(t *testing.T) {
	for kind, want := range map[string]string{"html": "an HTML page", "500": "HTTP 500", "truncated": "an unreadable exposition"} {
		t.Run(kind, func(t *testing.T) { brokenMetricsPage(t, kind, want) })
	}
}

// brokenMetricsPage runs the daemon on one broken endpoint beside a healthy
// replica and checks the page.
func brokenMetricsPage(t *testing.T, kind, want string) {
	broken := httptest.NewServer(brokenMetrics(kind))
	t.Cleanup(broken.Close)
	rep := newFakeReplica()
	healthy := httptest.NewServer(rep)
	t.Cleanup(healthy.Close)
	cfg := `
scrape: {interval: 100ms, health_probe: {interval: 300ms, timeout: 200ms}}
evaluation: {interval: 100ms}
alerts: {for: 300ms, keep_firing_for: 1s, resolved_retention: 1m, restore_grace: 2s}
`
	env := map[string]string{"WATCHDOG_CONFIG": writeConfig(t, cfg), "WATCHDOG_TARGETS": fmt.Sprintf("broken=%s,healthy=%s", broken.URL, healthy.URL)}
	_, logs := runDaemon(t, env)

	page := func(s string) (resolveNote, bool) {
		var n resolveNote
		return n, json.Unmarshal([]byte(s), &n) == nil && n.Msg == "notification"
	}
	line := logs.waitFor(t, "metrics_blind warning", func(s string) bool {
		n, ok := page(s)
		return ok && n.Class == "metrics_blind" && n.Replica == "broken" && n.Kind == "trigger"
	})
	n, _ := page(line)
	if n.Severity != "warning" || !strings.Contains(n.Summary, want) {
		t.Errorf("page %s %q, want a warning naming %q", n.Severity, n.Summary, want)
	}
	rep.waitScrapes(t, 20) // two more seconds: still nothing critical
	for _, s := range strings.Split(logs.text(), "\n") {
		if n, ok := page(s); ok && (n.Severity == "critical" || n.Class == "replica_down") {
			t.Errorf("a broken metrics endpoint on a healthy server paged %s %s on %s: %s", n.Severity, n.Class, n.Replica, n.Summary)
		}
	}
}
