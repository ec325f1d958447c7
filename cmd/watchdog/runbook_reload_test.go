package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServedRunbooksFollowTheReloadedThresholds: the daemon's
// /runbooks/preempt_storm states the critical retraction rate it was
// started with, and the new one after POST /-/reload.
func TestServedRunbooksFollowTheReloadedThresholds(t *testing.T) {
	replica := httptest.NewServer(newFakeReplica())
	t.Cleanup(replica.Close)
	cfgPath := filepath.Join(t.TempDir(), "watchdog.yaml")
	write := func(critical string) {
		t.Helper()
		cfg := "scrape: {interval: 1s}\nevaluation: {interval: 1s}\n" +
			"detectors:\n  preempt_storm: {min_retractions_per_second: 0.5, critical_retractions_per_second: " + critical + "}\n" +
			"targets:\n  - name: r0\n    url: " + replica.URL + "\n"
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("123.5")

	_, logs := runDaemon(t, map[string]string{"WATCHDOG_CONFIG": cfgPath}, "--web.enable-lifecycle")
	startLine := logs.waitFor(t, "start", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	json.Unmarshal([]byte(startLine), &started)
	base := "http://" + started.Listen

	if code, page := get(t, base+"/runbooks/preempt_storm"); code != http.StatusOK || !strings.Contains(page, "123.5") {
		t.Fatalf("runbook at start: status %d, configured 123.5 not shown", code)
	}
	write("77.25")
	resp, err := http.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: status %d", resp.StatusCode)
	}
	_, page := get(t, base+"/runbooks/preempt_storm")
	if !strings.Contains(page, "77.25") || strings.Contains(page, "123.5") {
		t.Error("after the reload the runbook does not show the new threshold alone")
	}
}
