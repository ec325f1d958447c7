package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/backtest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// The demo recorded by `watchdog record --demo` (the real daemon watching
// the simulated fleet through every incident class, in virtual time) and
// replayed by `watchdog backtest --recording` gives exactly the events the
// live run delivered to Slack and PagerDuty: same instants, kinds,
// severities, classes, replicas, headlines and evidence.
func TestBacktestOfDemoRecordingEqualsLiveRun(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	path := filepath.Join(t.TempDir(), "demo.rec.gz")
	var live demoRun
	synctest.Test(t, func(t *testing.T) {
		live = runDemoInBubble(t, func(ctx context.Context, dio daemonIO) error {
			return recordCmd(ctx, []string{"--demo", "--out", path}, map[string]string{}, dio)
		})
	})
	if len(live.events) == 0 {
		t.Fatal("the live run delivered nothing: the harness is broken")
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recording of %s of the demo: %d bytes", live.end, info.Size())

	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"backtest", "--recording", path, "--output", "json"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("backtest: %v\n%s", err, stderr.String())
	}
	var report backtest.Report
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("backtest --output json: %v\n%s", err, stdout.String())
	}

	// Each event once, whichever integrations it reached.
	var want []string
	seen := map[string]bool{}
	for _, r := range live.events {
		key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
		if !seen[key] {
			seen[key] = true
			want = append(want, liveEventLine(r.ev))
		}
	}
	var got []string
	for _, e := range report.Events {
		if len(e.To) > 0 { // the live run's integrations see only routed events
			got = append(got, reportEventLine(e))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("backtest timeline differs from the live run\nlive:\n%s\n\nbacktest:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if report.Pages == 0 || report.Rounds == 0 {
		t.Errorf("report counts %d pages over %d rounds", report.Pages, report.Rounds)
	}
}

func liveEventLine(ev notify.Event) string {
	var evidence []string
	for _, f := range notify.Shown(ev.Evidence) {
		evidence = append(evidence, notify.FormatField(f))
	}
	return eventLine(ev.At, string(ev.Kind), ev.Severity, ev.Class, ev.Replica, ev.Fingerprint, ev.Seq, notify.Headline(ev), evidence)
}

func reportEventLine(e backtest.ReportEvent) string {
	return eventLine(e.At, e.Kind, e.Severity, e.Class, e.Replica, e.Fingerprint, e.Seq, e.Headline, e.Evidence)
}

func eventLine(at time.Time, kind, severity, class, replica, fingerprint string, seq uint64, headline string, evidence []string) string {
	return fmt.Sprintf("%s %s %s %s %s %s/%d %q %q", at.UTC().Format(time.RFC3339Nano), kind, severity, class, replica, fingerprint, seq, headline, evidence)
}

// Command-line mistakes are usage errors (exit 2); a recording that cannot
// be read is an error naming the file and what is wrong with it.
func TestBacktestAndRecordCommandErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.rec.gz")
	if err := os.WriteFile(corrupt, []byte("not gzip at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	future := filepath.Join(dir, "future.rec.gz")
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	fmt.Fprintln(gz, `{"format":"sglang-watchdog-recording","version":99}`)
	gz.Close()
	if err := os.WriteFile(future, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{args: []string{"backtest"}, usage: true, want: "--recording FILE is required"},
		{args: []string{"backtest", "--recording", corrupt, "--output", "yaml"}, usage: true, want: `--output "yaml"`},
		{args: []string{"backtest", "--recording", corrupt, "extra"}, usage: true, want: "unexpected arguments"},
		{args: []string{"backtest", "--recording", filepath.Join(dir, "missing")}, want: "no such file"},
		{args: []string{"backtest", "--recording", corrupt}, want: corrupt + ": not a recording"},
		{args: []string{"backtest", "--recording", future}, want: "the file is version 99, this watchdog reads version 1"},
		{args: []string{"record"}, usage: true, want: "--out FILE is required"},
		{args: []string{"record", "--out", filepath.Join(dir, "x"), "--duration", "-1s"}, usage: true, want: "--duration"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, nil, &stdout, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got := exitCode(err) == 2; got != tc.usage {
				t.Errorf("usage error (exit 2) = %v, want %v: %v", got, tc.usage, err)
			}
		})
	}
}
