package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// The demo starts the simulated fleet and the real daemon, and a Ctrl-C
// (context cancellation) stops both cleanly.
func TestDemoStartsAndStopsCleanly(t *testing.T) {
	outR, outW := io.Pipe()
	out := collect(outR)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"demo"}, map[string]string{"WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:0"}, outW, io.Discard)
		outW.Close()
		done <- err
	}()
	// The narrator and the daemon start concurrently: their first lines
	// come in either order.
	seen := map[string]bool{}
	out.waitFor(t, "listening line and first scenario phase", func(s string) bool {
		seen["listening"] = seen["listening"] || strings.Contains(s, "watchdog listening on http://127.0.0.1:")
		seen["phase"] = seen["phase"] || strings.Contains(s, "scenario: healthy")
		return seen["listening"] && seen["phase"]
	})
	// Each target line gives the URL the daemon scrapes, so a user can
	// curl it as printed.
	targets := 0
	for line := range strings.Lines(out.text()) {
		fields := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || len(fields) != 2 || !strings.HasPrefix(fields[1], "http://") {
			continue
		}
		targets++
		resp, err := http.Get(fields[1])
		if err != nil {
			t.Fatalf("target %s: %v", fields[0], err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("target %s printed as %s answers %s", fields[0], fields[1], resp.Status)
		}
	}
	if targets != 7 {
		t.Errorf("demo printed %d target URLs, want 7 (3 replicas, the gateway, 3 GPU exporters):\n%s", targets, out.text())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo returned %v", err)
	}
	out.end(t) // the collector may not have read the last line yet
	if !strings.Contains(out.text(), "demo stopped.") {
		t.Error("no clean stop message")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"run", "extra"}} {
		err := run(context.Background(), args, map[string]string{}, io.Discard, io.Discard)
		if err == nil || exitCode(err) != 2 {
			t.Errorf("%v: err %v, exit %d", args, err, exitCode(err))
		}
	}
	// No targets is a configuration to fix, not a usage error: the daemon
	// waits for one it can use.
	if logs := waitingDaemon(t, []string{"run"}, map[string]string{}); !strings.Contains(logs, "targets: no targets; set WATCHDOG_TARGETS") {
		t.Errorf("no targets: the log does not say so:\n%s", logs)
	}
}

// Deliveries run beside the console, so a dry-run line can print before
// the page block it belongs to: it carries the page's number to match.
func TestDemoDryRunLineNamesItsPage(t *testing.T) {
	var b strings.Builder
	ev := notify.Event{Kind: notify.KindUpdate, Severity: detect.Critical, Class: "preempt_storm", Replica: "sim-0", Seq: 2, Fingerprint: "f8bc"}
	if err := (dryRun{name: "Slack", w: &b}).Notify(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if want := "   [would send to Slack] update critical preempt_storm on sim-0 #2 (dedup key f8bc)\n"; b.String() != want {
		t.Errorf("dry-run line %q, want %q", b.String(), want)
	}
}
