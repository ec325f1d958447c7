package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// resolveNote is the structured log line of a notification, with the
// summary the resolve carries.
type resolveNote struct {
	Msg, Kind, Class, Replica, Severity, Summary string
}

// TestDaemonCrashedReplicaResolvesWhenItServesAgain: a replica that
// crashes (its port refuses connections) pages critical replica_down; when
// it serves again (a new process: counters from zero) the incident
// resolves at once, not after a restart look-back, and the resolve says it
// came back after a restart.
func TestDaemonCrashedReplicaResolvesWhenItServesAgain(t *testing.T) {
	rep := newFakeReplica()
	srv := httptest.NewServer(rep)
	addr := srv.Listener.Addr().String()
	t.Cleanup(func() { srv.Close() })

	cfg := `
scrape: {interval: 100ms, health_probe: {enabled: false}}
evaluation: {interval: 100ms}
detectors:
  replica_down: {failures_to_page: 3, crash_loop_window: 10s}
  replica_restarted: {lookback: 1m}
alerts: {for: 300ms, keep_firing_for: 300ms, resolved_retention: 1m, restore_grace: 2s}
`
	env := map[string]string{"WATCHDOG_CONFIG": writeConfig(t, cfg), "WATCHDOG_TARGETS": "r=" + srv.URL}
	_, logs := runDaemon(t, env)
	note := func(what string, match func(n resolveNote) bool) resolveNote {
		var got resolveNote
		logs.waitFor(t, what, func(s string) bool {
			var n resolveNote
			if json.Unmarshal([]byte(s), &n) != nil || n.Msg != "notification" {
				return false
			}
			got = n
			return match(n)
		})
		return got
	}

	rep.waitScrapes(t, 20)
	// The process dies: nothing listens on its port any more.
	srv.Close()
	trigger := note("replica_down trigger", func(n resolveNote) bool {
		return n.Class == "replica_down" && n.Replica == "r" && n.Kind == "trigger"
	})
	if trigger.Severity != "critical" {
		t.Errorf("down page severity %q, want critical", trigger.Severity)
	}
	// A new process on the same port, counters from zero.
	rep.restart()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %s not free again for the restarted replica: %v", addr, err)
	}
	back := &httptest.Server{Listener: l, Config: &http.Server{Handler: rep}}
	back.Start()
	t.Cleanup(back.Close)

	resolve := note("replica_down resolve", func(n resolveNote) bool {
		return n.Class == "replica_down" && n.Replica == "r" && n.Kind == "resolve"
	})
	if !strings.Contains(resolve.Summary, "came back after a restart") {
		t.Errorf("the resolve does not say the replica came back after a restart: %q", resolve.Summary)
	}
	for _, s := range strings.Split(logs.text(), "\n") {
		var n resolveNote
		if json.Unmarshal([]byte(s), &n) == nil && n.Msg == "notification" && n.Class == "replica_restarted" {
			t.Errorf("the restart that ended the outage was paged again: %s", fmt.Sprint(n))
		}
	}
}
